"""The process of an embedded server (Redis, ZooKeeper, Kafka, S3): one lifecycle for all four.

    (stopped) --start: reap a killed run's server, launch, probe until ready--> (serving)
    (stopped) --adopt: a killed run's server still runs and answers--> (serving, adopted: not our child)
    (serving) --stop: SIGTERM, then SIGKILL after a grace--> (stopped)
    (serving) --kill: SIGKILL, as a crash--> (stopped; its data kept, so start is a restart)
    (serving) --send(SIGSTOP)--> (frozen: listening, answering nobody) --send(SIGCONT)--> (serving)

Each server records its pid in its directory (``orphans.py``), so a run
killed without cleaning up cannot leave a second server on the same data,
and logs to ``<name>.log`` there. "Ready" is the server's own probe: a
session opened, a ping answered, a metadata request served — never only a
port that listens.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Self

from ftpipeline.embedded.orphans import alive, reap, record, running


class ServerProcess:
    what = "server"          # in errors: "ZooKeeper exited with 1"
    stem = "server"          # <stem>.pid and <stem>.log in the directory
    marker = b""             # in a recorded pid's command line: it is still ours to kill
    stop_grace_s = 10.0

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._proc: subprocess.Popen[bytes] | None = None
        self._adopted: int | None = None  # the pid of a server an earlier run started (not our child)

    def start(self, timeout_s: float = 60.0) -> Self:
        raise NotImplementedError

    def _answers(self) -> bool:
        """The server's own probe: it serves clients."""
        raise NotImplementedError

    def _address(self) -> dict[str, int]:
        """What a later run needs to reach this server again (its ports), kept beside its pid."""
        return {}

    def _readdress(self, address: dict[str, int]) -> None:
        """Take back what ``_address`` kept."""

    def adopt(self) -> bool:
        """Keep the server a killed run left in this directory, if it still runs and answers (a resumed
        run takes over its workers, which know its address and credentials); False: ``start`` one."""
        pid = alive(self.directory / f"{self.stem}.pid", self.marker)
        address = self._recorded_address()
        if pid is None or address is None:
            return False
        try:
            self._readdress(address)
        except (ValueError, KeyError):
            return False
        if not self._answers():
            return False
        self._adopted = pid
        return True

    def _recorded_address(self) -> dict[str, int] | None:
        """What ``_address`` kept of the last server of this directory (None: nothing readable)."""
        try:
            return dict(json.loads((self.directory / f"{self.stem}.address.json").read_text()))
        except (OSError, ValueError):
            return None

    def _reap(self) -> None:
        """Kill the server a killed run left in this directory (before anything touches its data)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        reap(self.directory / f"{self.stem}.pid", self.marker)

    def _launch(self, args: list[str], ready: Callable[[], bool], timeout_s: float, interval_s: float = 0.1,
                env: dict[str, str] | None = None) -> None:
        with open(self.directory / f"{self.stem}.log", "ab") as log:
            self._proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
        record(self.directory / f"{self.stem}.pid", self._proc.pid)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"{self.what} exited with {self._proc.returncode}; "
                                   f"see {self.directory / f'{self.stem}.log'}")
            if ready():
                (self.directory / f"{self.stem}.address.json").write_text(json.dumps(self._address()))
                return
            time.sleep(interval_s)
        self.stop()
        raise TimeoutError(f"{self.what} was not ready within {timeout_s}s; see {self.directory / f'{self.stem}.log'}")

    def stop(self) -> None:
        if self._adopted is not None:
            _end(self._adopted, self.stop_grace_s)
            self._adopted = None
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(self.stop_grace_s)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc = None

    def kill(self) -> None:
        """SIGKILL, as a crash: no clean shutdown; the data directory is kept and ``start`` restarts it."""
        if self._adopted is not None:
            _end(self._adopted, 0.0)
            self._adopted = None
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()
        self._proc = None

    def send(self, sig: signal.Signals) -> None:
        """A signal to the running server: SIGSTOP and SIGCONT freeze and thaw it, as a machine that hangs
        (fault tests); a stopped server is an error."""
        pid = self._adopted if self._adopted is not None else (self._proc.pid if self._proc is not None else None)
        if pid is None:
            raise RuntimeError(f"{self.what} is not running")
        os.kill(pid, sig)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()


def _end(pid: int, grace_s: float) -> None:
    """SIGTERM (none if ``grace_s`` is 0), then SIGKILL after the grace, to a process that is not our child."""
    deadline = time.monotonic() + grace_s
    try:
        os.kill(pid, signal.SIGTERM if grace_s else signal.SIGKILL)
        while running(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if running(pid):
            os.kill(pid, signal.SIGKILL)
        while running(pid):
            time.sleep(0.02)
    except ProcessLookupError:
        pass
