"""What ``ftpipeline run`` shows and keeps as the coordinator works: a rich progress bar, and the step history.

The coordinator reports through an :class:`~ftpipeline.coordinator.coordinator.Observer`;
the operator turns the same calls into status and Events. Here they become
a progress bar (steps committed, rows/s, recoveries, checkpoints, control
plane faults) and, for a Kafka source, the offsets of every step
(``kafka/local.py``), which ``--verify`` needs.
"""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from ftpipeline.coordinator.coordinator import Observer
from ftpipeline.coordinator.recovery import RecoveryRecord
from ftpipeline.coordinator.trigger import Reason
from ftpipeline.kafka.local import StepHistory
from ftpipeline.lineage.naming import Slot, WorkerId


class LocalObserver(Observer):
    """What every local run keeps: the offsets of each step of a Kafka source (``kafka/local.py``)."""

    def __init__(self, history: StepHistory | None) -> None:
        self.history = history

    def on_step_recorded(self, step: int, offsets: dict[Slot, tuple[int, int]]) -> None:
        if self.history is not None:
            self.history.append(step, {slot.key(): o for slot, o in offsets.items()})


class ProgressObserver(LocalObserver):
    """A rich progress bar: steps committed, rows/s, recoveries."""

    def __init__(self, console: Console, total_steps: int | None, history: StepHistory | None) -> None:
        super().__init__(history)
        self.console = console
        self.progress = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("{task.fields[rate]}"), TextColumn("[yellow]{task.fields[info]}"), TimeElapsedColumn(),
            console=console,
        )
        self.total_steps = total_steps
        self.task: TaskID | None = None
        self.rows = 0
        self.first_step_at: float | None = None
        self.recoveries = 0
        self.lag: int | None = None  # records a Kafka source has not read yet (none for other sources)

    def __enter__(self) -> ProgressObserver:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def on_workers_starting(self, workers: list[WorkerId]) -> None:
        self.task = self.progress.add_task("starting workers", total=len(workers), rate="", info="warming up Spark")

    def on_worker_joined(self, worker: WorkerId, ready: int, total: int) -> None:
        if self.first_step_at is None and self.task is not None:
            self.progress.update(self.task, completed=ready)
        else:
            self.console.log(f"worker {worker} joined ({ready} workers)")

    def on_step_started(self, step: int, reason: Reason, rows: int) -> None:
        assert self.task is not None
        if self.first_step_at is None:
            self.first_step_at = time.monotonic()
            self.progress.update(self.task, total=self.total_steps, completed=0, info="")
        self.progress.update(self.task, description=f"step {step} ({reason.value})")

    def on_source_lag(self, records: int) -> None:
        self.lag = records

    def on_step_committed(self, step: int, rows: int, seconds: float) -> None:
        assert self.task is not None and self.first_step_at is not None
        self.rows += rows
        rate = self.rows / max(time.monotonic() - self.first_step_at, 1e-9)
        info = [f"{self.recoveries} recoveries"] if self.recoveries else []
        if self.lag is not None:
            info.append(f"lag {self.lag:,} records")
        self.progress.update(self.task, completed=step, rate=f"{rate:,.0f} rows/s", info=", ".join(info))

    def on_worker_lost(self, worker: WorkerId) -> None:
        self.console.log(f"[red]worker {worker} lost[/red]: planning lineage recovery")

    def on_recovery(self, record: RecoveryRecord) -> None:
        self.recoveries += 1
        self.console.log(f"[yellow]recovered {record.worker}[/yellow]: {record.describe()}; "
                         "a replacement worker starts after the next commit")

    def on_control_plane(self, component: str, available: bool, message: str) -> None:
        self.console.log(f"[{'green' if available else 'red'}]{message}[/]")

    def on_checkpoint(self, info: dict[str, Any]) -> None:
        self.console.log(f"checkpoint {info['epoch']} committed at step {info['boundary']} in {info['seconds']:.2f} s "
                         f"({info['bytes']:,} bytes, {info['inflight']} in-flight messages)")

    def on_checkpoint_aborted(self, epoch: int, reason: str) -> None:
        self.console.log(f"[yellow]checkpoint {epoch} aborted[/yellow]: {reason}; the next one starts when due")
