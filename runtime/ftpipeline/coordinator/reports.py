"""What a run tells while it runs (``Observer``: the CLI draws it, the operator turns it into status and Events)
and what it leaves (``RunResult``: the summary, the report, the benchmarks)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ftpipeline.coordinator.recovery import RecoveryRecord
from ftpipeline.coordinator.trigger import Reason
from ftpipeline.lineage.naming import Slot, WorkerId


class Observer:
    """Receives progress events (the CLI draws them; the operator turns them into status)."""

    def on_workers_starting(self, workers: list[WorkerId]) -> None: ...
    def on_workers_kept(self, workers: list[WorkerId], why_not: str | None) -> None: ...
    def on_worker_joined(self, worker: WorkerId, ready: int, total: int) -> None: ...
    def on_step_started(self, step: int, reason: Reason, rows: int) -> None: ...
    def on_step_recorded(self, step: int, offsets: dict[Slot, tuple[int, int]],
                         watermark: int | None = None) -> None: ...
    def on_source_lag(self, records: int) -> None: ...
    def on_steps_expected(self, total: int) -> None: ...  # bounded sources: the steps the run will have
    def on_watermark(self, step: int, watermark: int | None, lag_seconds: float | None) -> None: ...  # eventtime/
    def on_step_committed(self, step: int, rows: int, seconds: float) -> None: ...
    def on_worker_lost(self, worker: WorkerId, how: str = "") -> None: ...  # how: what found the loss
    def on_recovery(self, record: RecoveryRecord) -> None: ...
    def on_checkpoint(self, info: dict[str, Any]) -> None: ...
    def on_checkpoint_aborted(self, epoch: int, reason: str) -> None: ...
    def on_control_plane(self, component: str, available: bool, message: str) -> None: ...
    def on_fenced(self, worker: WorkerId, what: str) -> None: ...  # a worker let go tried to commit or write
    def on_rollback(self, record: RecoveryRecord) -> None: ...  # the run rolled back by itself (Redis came back empty)
    def on_evacuated(self, record: RecoveryRecord) -> None: ...  # a leaving worker handed its channels over
    def on_nondeterministic(self, stage: str, task: str, objects: int) -> None: ...  # lineage/determinism.py
    def on_event_time(self, kind: str, about: str, message: str) -> None: ...  # eventtime/watch.py: late, held back


@dataclass
class RunResult:
    committed: int
    source_rows: int
    seconds: float
    recoveries: list[RecoveryRecord] = field(default_factory=list)
    evacuations: list[RecoveryRecord] = field(default_factory=list)  # workers that left by plan (evacuation.py)
    stats: dict[str, int] = field(default_factory=dict)
    step_seconds: list[float] = field(default_factory=list)
    tasks_by_worker: dict[str, int] = field(default_factory=dict)
    joins: list[dict[str, Any]] = field(default_factory=list)  # replacements: worker, committed step at join
    checkpoints: list[dict[str, Any]] = field(default_factory=list)
    buffers: list[dict[str, Any]] = field(default_factory=list)  # held bytes per worker, every few steps
    commit_at: list[float] = field(default_factory=list)          # seconds since start when each step committed
    outages: list[dict[str, Any]] = field(default_factory=list)   # ZooKeeper/Redis out of reach: how long, outcome
    dead_letters: int = 0                                         # each malformed record once (tally.py)
    late_records: int = 0                                         # each record behind the watermark once
    late_by_stage: dict[str, int] = field(default_factory=dict)   # the same, per stage
    watermark: int | None = None                                  # the last step's (eventtime/), us
    rollbacks: list[RecoveryRecord] = field(default_factory=list)  # rolled back by itself (Redis came back empty)
    phases: dict[str, Any] = field(default_factory=dict)          # where a step's time goes (obs/phases.py)
