"""Processes a killed ``ftpipeline run`` left behind, found again by a pid file and killed.

A coordinator killed with SIGKILL cannot stop its children: its private Redis
and ZooKeeper and its workers keep running. The next run in the same
directory (``--resume``) must not start a second ZooKeeper on the same data
directory, nor a second ``w0`` on the same buffer directory, so whatever it
starts it records in a pid file, and before starting it kills the process
group a previous run recorded there — only if that process still runs our
program (the pid may have been reused).

A resumed run may instead *keep* what it finds still running (``alive``):
its Redis and ZooKeeper (``embedded/process.py``'s ``adopt``) and its
workers (``cluster/local.py``), which it then takes over as an operator
takes over the pods of the one before it (``coordinator/admission.py``).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path


def record(pid_file: Path, pid: int) -> None:
    pid_file.write_text(str(pid))


def alive(pid_file: Path, marker: bytes) -> int | None:
    """The pid ``pid_file`` names if that process still runs our program (``marker`` in its command line)."""
    try:
        pid = int(pid_file.read_text())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        return None
    return pid if marker in cmdline and running(pid) else None


def reap(pid_file: Path, marker: bytes) -> bool:
    """Kill the process ``pid_file`` names if it still runs our program (``alive``)."""
    pid = alive(pid_file, marker)
    pid_file.unlink(missing_ok=True)
    return pid is not None and kill_and_wait(pid, [pid])


def kill_and_wait(target: int, members: list[int], group: bool = False) -> bool:
    """SIGKILL ``target`` (with ``group``: the process group of that id), then wait up to 5 s until every
    one of ``members`` ended, so their ports, sockets and files are free; False when nothing was there."""
    try:
        if group:
            os.killpg(target, signal.SIGKILL)
        else:
            os.kill(target, signal.SIGKILL)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(running(pid) for pid in members):
        time.sleep(0.05)
    return True


def running(pid: int) -> bool:
    """Is ``pid`` a live process (not ended, not a zombie waiting for its parent)?"""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in status
