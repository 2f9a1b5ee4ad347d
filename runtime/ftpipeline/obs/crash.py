"""Crash points for tests: a process exits at once at a named point of a protocol.

``FTPIPELINE_CRASH_AFTER=<kind>[:<n>][@<worker>]`` makes the process that
reaches the n-th (default first) point of that kind exit with ``os._exit``:
no cleanup, no goodbye (a SIGKILL to itself would be ignored where it is a
container's PID 1). With ``@<worker>`` only that worker's sidecar does, so a
replacement, which gets another name, does not crash again. The points:

    recovery, step-committed, ...  the coordinator, after it wrote that command to the log (``journal.py``)
    kafka-produced                 a sidecar, after a step's records of one sink channel are in its Kafka
                                   transaction and before the commit (``barrier/kafka.py``)
    delta-written                  a sidecar, after its Spark process committed a step to a Delta table and
                                   before the release is answered (``barrier/delta.py``)
    process-done                   a sidecar, after it recorded a keyed function's task (its outputs held
                                   here alone: a recovery re-runs it, ``lineage/determinism.py``)
"""

from __future__ import annotations

import os
from dataclasses import dataclass

CRASH_EXIT = 137  # as if killed by SIGKILL


@dataclass
class CrashPoint:
    kind: str
    nth: int = 1
    seen: int = 0

    @staticmethod
    def from_env(worker: str | None = None) -> CrashPoint | None:
        """The configured point, if any applies to this process (``worker``: a sidecar's name)."""
        raw = os.environ.get("FTPIPELINE_CRASH_AFTER")
        if not raw:
            return None
        raw, _, only = raw.partition("@")
        if only and only != worker:
            return None
        kind, _, nth = raw.partition(":")
        return CrashPoint(kind, int(nth or 1))

    def after(self, kind: str) -> None:
        if kind == self.kind:
            self.seen += 1
            if self.seen == self.nth:
                os._exit(CRASH_EXIT)
