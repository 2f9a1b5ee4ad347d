"""Fault injection for demos and tests: kill one worker mid-flight.

A kill is placed either at a step — after ``after_tasks`` of that step's tasks
completed, so some of the step's objects exist and some tasks are still
pending (the interesting case for lineage) — or at a time since the first
step. The victim is named, or drawn from a seeded random generator, so a
failing run can be repeated exactly.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from ftpipeline.lineage.naming import WorkerId


@dataclass
class FaultPlan:
    at_step: int | None = None
    after_tasks: int = 1
    after_seconds: float | None = None
    worker: WorkerId | None = None
    seed: int = 0
    fired: bool = field(default=False, init=False)

    def victim(self, workers: list[WorkerId]) -> WorkerId:
        if self.worker is not None:
            if self.worker not in workers:
                raise ValueError(f"--kill-worker {self.worker}: no such worker (have {', '.join(workers)})")
            return self.worker
        return random.Random(self.seed).choice(sorted(workers))

    def due(self, step: int, tasks_done_in_step: int, seconds: float) -> bool:
        if self.fired:
            return False
        if self.at_step is not None:
            return step == self.at_step and tasks_done_in_step >= self.after_tasks
        if self.after_seconds is not None:
            return seconds >= self.after_seconds
        return False
