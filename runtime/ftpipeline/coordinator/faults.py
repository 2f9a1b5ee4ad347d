"""Fault injection for demos and tests: kill (or silence) one worker mid-flight.

A kill is placed either at a step — after ``after_tasks`` of that step's tasks
completed, so some of the step's objects exist and some tasks are still
pending (the interesting case for lineage) — or at a time since the first
step, or while a checkpoint is being taken (at or after a given step). The victim is named, or drawn from a seeded random generator, so a
failing run can be repeated exactly.

The coordinator itself can be made to crash right after it wrote a given
command to the command log (``obs/crash.py``: ``FTPIPELINE_CRASH_AFTER=
recovery`` or ``step-committed:5``), to test that a restarted coordinator
continues from the log whatever it was doing.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from ftpipeline.lineage.naming import WorkerId
from ftpipeline.obs.crash import CRASH_EXIT, CrashPoint


@dataclass
class FaultPlan:
    at_step: int | None = None
    after_tasks: int = 1
    after_seconds: float | None = None
    worker: WorkerId | None = None
    seed: int = 0
    during_checkpoint: bool = False
    action: str = "kill"  # kill: SIGKILL / pod deletion; stop: SIGSTOP (alive but silent); zombie: stop,
                          # and the kill that follows never reaches it (a partition), so it wakes up later;
                          # evict: asked to leave (SIGTERM / the Eviction API), as a drain does
    fired: bool = field(default=False, init=False)

    def victim(self, workers: list[WorkerId]) -> WorkerId:
        if self.worker is not None:
            if self.worker not in workers:
                raise ValueError(f"--kill-worker {self.worker}: no such worker (have {', '.join(workers)})")
            return self.worker
        return random.Random(self.seed).choice(sorted(workers))

    def due(self, step: int, tasks_done_in_step: int, seconds: float, checkpointing: bool = False) -> bool:
        if self.fired:
            return False
        if self.during_checkpoint:
            return checkpointing and (self.at_step is None or step >= self.at_step)
        if self.at_step is not None:  # tasks_done_in_step: of step at_step (pipelined: later steps may run too)
            return step >= self.at_step and tasks_done_in_step >= self.after_tasks
        if self.after_seconds is not None:
            return seconds >= self.after_seconds
        return False


__all__ = ["CRASH_EXIT", "CrashPoint", "FaultPlan"]
