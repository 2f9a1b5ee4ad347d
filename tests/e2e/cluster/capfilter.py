"""runc behind a filter: drops from a container's capabilities those this machine's root does not hold.

Some machines (VM sandboxes) run root without every capability in its
bounding set. Docker's engine (Debian's 20.10) gives a privileged container,
or a ``docker exec --privileged``, every capability it knows, and runc then
fails with "unable to apply caps: operation not permitted"; kind runs its node
containers privileged and execs into them privileged. The provider registers
this module as the engine's default runtime: it removes, from the OCI
configuration runc is about to read (``create``/``run --bundle``, ``exec
--process``), each capability outside its own bounding set, then becomes runc
with the same arguments. Where root holds every capability it changes nothing.

Standard library only: the engine runs it for every container operation.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

RUNC = "/usr/sbin/runc"
# capability(7) numbers 0..40, in order
NAMES = ("CHOWN DAC_OVERRIDE DAC_READ_SEARCH FOWNER FSETID KILL SETGID SETUID SETPCAP LINUX_IMMUTABLE "
         "NET_BIND_SERVICE NET_BROADCAST NET_ADMIN NET_RAW IPC_LOCK IPC_OWNER SYS_MODULE SYS_RAWIO SYS_CHROOT "
         "SYS_PTRACE SYS_PACCT SYS_ADMIN SYS_BOOT SYS_NICE SYS_RESOURCE SYS_TIME SYS_TTY_CONFIG MKNOD LEASE "
         "AUDIT_WRITE AUDIT_CONTROL SETFCAP MAC_OVERRIDE MAC_ADMIN SYSLOG WAKE_ALARM BLOCK_SUSPEND AUDIT_READ "
         "PERFMON BPF CHECKPOINT_RESTORE").split()

SUBCOMMANDS = {"create", "run", "exec", "start", "delete", "kill", "state", "ps", "pause", "resume", "update",
               "features", "events", "checkpoint", "restore", "list", "spec"}


def missing() -> set[str]:
    """``CAP_<name>`` of each known capability outside this process's bounding set."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapBnd:"):
            held = int(line.split()[1], 16)
            return {f"CAP_{name}" for bit, name in enumerate(NAMES) if not held >> bit & 1}
    return set()


def filter_process(process: dict[str, object], drop: set[str]) -> bool:
    caps = process.get("capabilities")
    if not isinstance(caps, dict):
        return False
    changed = False
    for kind, names in caps.items():
        if isinstance(names, list) and drop & set(names):
            caps[kind] = [n for n in names if n not in drop]
            changed = True
    return changed


def option(args: list[str], *names: str) -> str | None:
    for i, arg in enumerate(args):
        for name in names:
            if arg == name and i + 1 < len(args):
                return args[i + 1]
            if arg.startswith(name + "="):
                return arg.split("=", 1)[1]
    return None


def rewrite(path: Path, bundle: bool, drop: set[str]) -> None:
    doc = json.loads(path.read_text())
    target = doc.get("process", {}) if bundle else doc
    if filter_process(target, drop):
        path.write_text(json.dumps(doc))


def main(args: list[str]) -> None:
    drop = missing()
    if drop:
        command = next((a for a in args if a in SUBCOMMANDS), None)
        if command in ("create", "run"):
            bundle = option(args, "--bundle", "-b") or "."
            rewrite(Path(bundle) / "config.json", True, drop)
        elif command == "exec":
            process = option(args, "--process", "-p")
            if process:
                rewrite(Path(process), False, drop)
    os.execv(RUNC, [RUNC, *args])


if __name__ == "__main__":
    main(sys.argv[1:])
