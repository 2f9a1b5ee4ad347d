"""Carrying out lineage recovery: lock, snapshot, plan, apply, wake.

The plan itself is a pure function (``lineage.planner``); this module is the
protocol around it, in the order the seed prescribes:

1. take the PT delete lock exclusively — from here on no worker can drop an
   object, so everything the snapshot sees as present stays present;
2. read all tables in one transaction (a consistent snapshot);
3. plan;
4. apply the plan in one script: re-launched and regeneration tasks into the
   survivors' NTTs, inputs resurrected from the cemetery, the lost worker's
   NOT and PT entries dropped, its channels moved, the worker fenced off
   (removed from ``alive``), the recovery epoch advanced;
5. release the lock and wake the survivors so they pull their new tasks now
   rather than at their next periodic refresh.

Survivors never stop working meanwhile: completions of tasks they were
already running are recorded while the lock is held (only deletions wait).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ftpipeline.lineage.naming import WorkerId
from ftpipeline.lineage.planner import RecoveryPlan, TaskGraph, plan_recovery
from ftpipeline.lineage.tables import LineageTables
from ftpipeline.worker.transport import SidecarClient

log = logging.getLogger("ftpipeline.recovery")


@dataclass
class RecoveryRecord:
    plan: RecoveryPlan
    detected_at: float
    seconds: float
    to_commit_seconds: float | None = None

    @property
    def strategy(self) -> str:
        return self.plan.strategy

    def summary(self) -> dict[str, Any]:
        p = self.plan
        return {
            "worker": p.dead,
            "epoch": p.epoch,
            "strategy": self.strategy,
            "tasks": len(p.tasks),
            "rebuilt": [c.key() for c in p.rebuilt],
            "moved": {c.key(): w for c, w in p.moves.items()},
            "lost_objects": len(p.lost),
            "buffered_rows": p.buffered_rows,
            "planned_rows": p.planned_rows,
            "seconds": round(self.seconds, 4),
        }


def recover(
    graph: TaskGraph,
    tables: LineageTables,
    dead: WorkerId,
    survivors: list[WorkerId],
    owner: str,
    clients: Mapping[WorkerId, SidecarClient],
    clock: Callable[[], float] = time.monotonic,
) -> RecoveryRecord:
    started = clock()
    epoch = tables.epoch() + 1
    tables.lock_exclusive(owner)
    try:
        view = tables.snapshot([*survivors, dead])
        plan = plan_recovery(graph, view, dead, survivors, epoch)
        tables.apply(plan)
    finally:
        tables.unlock_exclusive(owner)
    for worker, client in clients.items():
        try:
            client.call("wake", timeout_s=5)
        except Exception as exc:  # a survivor dying now is the next failure; the backend reports it
            log.warning("wake failed", extra={"worker": worker, "error": str(exc)})
    return RecoveryRecord(plan, started, clock() - started)
