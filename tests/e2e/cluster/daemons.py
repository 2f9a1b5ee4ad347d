"""Processes a cluster provider starts on this machine and stops again: one pidfile and one log each.

The local provider runs its whole cluster this way; the kind provider only the Docker engine and the
registry mirror it needs where none is running.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path


class Daemons:
    state: Path

    def _pidfile(self, name: str) -> Path:
        return self.state / "run" / f"{name}.pid"

    def _alive(self, name: str) -> int | None:
        try:
            pid = int(self._pidfile(name).read_text())
            os.kill(pid, 0)
            return pid
        except (OSError, ValueError):
            return None

    def _start(self, name: str, *cmd: str | Path, preexec: Callable[[], None] | None = None) -> None:
        if self._alive(name):
            return
        (self.state / "run").mkdir(parents=True, exist_ok=True)
        (self.state / "logs").mkdir(parents=True, exist_ok=True)
        with open(self.state / "logs" / f"{name}.log", "ab") as log:
            proc = subprocess.Popen([str(c) for c in cmd], stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=preexec)
        self._pidfile(name).write_text(str(proc.pid))

    def _stop(self, name: str, grace_s: float = 10) -> None:
        pid = self._alive(name)
        if pid:
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + grace_s
            while time.monotonic() < deadline and self._alive(name):
                time.sleep(0.1)
            if self._alive(name):
                os.kill(pid, signal.SIGKILL)
        self._pidfile(name).unlink(missing_ok=True)

    def _wait(self, what: str, check: object, timeout_s: float, daemon: str | None = None) -> None:
        deadline = time.monotonic() + timeout_s
        last: Exception | None = None
        while time.monotonic() < deadline:
            if daemon and not self._alive(daemon):
                log = (self.state / "logs" / f"{daemon}.log").read_text()[-3000:]
                raise RuntimeError(f"{daemon} exited while waiting for {what}:\n{log}")
            try:
                if check():  # type: ignore[operator]
                    return
            except Exception as exc:  # noqa: BLE001 - we report the last one
                last = exc
            time.sleep(0.5)
        logs = self.state / "logs"
        raise TimeoutError(f"{what} not ready after {timeout_s:.0f}s (last error: {last}); logs in {logs}")

