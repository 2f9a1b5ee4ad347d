"""What ``ftpipeline run`` shows and keeps as the coordinator works: a rich progress bar, and the faults.

The coordinator reports through an :class:`~ftpipeline.coordinator.coordinator.Observer`;
the operator turns the same calls into status and Events. Here they become
a progress bar (steps committed, rows/s, recoveries, checkpoints, control
plane faults) and, for a Kafka source, the offsets of every step
(``kafka/local.py``), which ``--verify`` needs.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from ftpipeline.coordinator.coordinator import Observer
from ftpipeline.coordinator.recovery import RecoveryRecord
from ftpipeline.coordinator.trigger import Reason
from ftpipeline.lineage.naming import WorkerId


LEDGER = "faults.jsonl"  # in the run directory: every recovery, rollback and pause of the run, across resumes


class FaultLedger:
    """What the run went through, one JSON line per fault as it happens (so a coordinator killed mid-run
    leaves it behind): a resumed run's summary counts the runs before it too. A fresh run starts it anew."""

    def __init__(self, path: Path, fresh: bool) -> None:
        self.path = path
        if fresh:
            path.unlink(missing_ok=True)
        self.earlier = self.counts()  # what runs before this one (resumed) went through

    def append(self, kind: str, **fields: Any) -> None:
        with self.path.open("a") as out:
            out.write(json.dumps({"kind": kind, **fields}, default=str) + "\n")

    def counts(self) -> dict[str, int]:
        """kind (recovery, rollback, pause) -> how many."""
        found: dict[str, int] = {}
        if self.path.exists():
            for line in self.path.read_text().splitlines():
                try:
                    kind = str(json.loads(line)["kind"])
                except (ValueError, KeyError, TypeError):
                    continue  # a line cut short by a kill
                found[kind] = found.get(kind, 0) + 1
        return found


class LocalObserver(Observer):
    """What every local run shows and keeps, with or without a progress bar: one line per fault and its
    outcome (a worker lost and how it was found, its recovery, a zombie refused, ZooKeeper or Redis out of
    reach and back, an aborted checkpoint)."""

    def __init__(self, console: Console, ledger: FaultLedger | None = None) -> None:
        self.console = console
        self.ledger = ledger
        self.recoveries = 0

    def _line(self, text: str) -> None:
        """One line, with the time (printed above the progress bar while there is one)."""
        self.console.print(f"[dim]{time.strftime('%H:%M:%S')}[/dim] {text}")

    def on_workers_kept(self, workers: list[WorkerId], why_not: str | None) -> None:
        if why_not is None:
            self._line(f"taking over the workers the earlier run left running ({', '.join(workers)}): no new "
                       "JVM, they reopen the newest checkpoint")
        else:
            self._line(f"[yellow]not taking over the workers the earlier run left running[/yellow] "
                       f"({', '.join(workers)}): {why_not}; starting new ones")

    def on_worker_lost(self, worker: WorkerId, how: str = "") -> None:
        self._line(f"[red]worker {worker} lost[/red]" + (f", found by {how}" if how else "")
                         + ": planning its recovery")

    def _record(self, kind: str, **fields: Any) -> None:
        if self.ledger is not None:
            self.ledger.append(kind, at=time.time(), **fields)

    def on_recovery(self, record: RecoveryRecord) -> None:
        self.recoveries += 1
        self._record("recovery", worker=record.worker, strategy=record.strategy, seconds=round(record.seconds, 4))
        self._line(f"[yellow]recovered {record.worker}[/yellow]: {record.describe()}; "
                         "a replacement worker starts after the next commit")

    def on_evacuated(self, record: RecoveryRecord) -> None:
        self._record("evacuation", worker=record.worker, seconds=round(record.seconds, 4))
        self._line(f"[yellow]evacuated {record.worker}[/yellow]: {record.describe()}; "
                   "a replacement worker starts after the next commit")

    def on_fenced(self, worker: WorkerId, what: str) -> None:
        self._line(f"[yellow]worker {worker} woke up after its recovery and was fenced off[/yellow]: {what}")

    def on_event_time(self, kind: str, about: str, message: str) -> None:
        """Late records dropped, a watermark held back, a source channel with no input (eventtime/watch.py)."""
        self._line(f"[yellow]{kind}[/yellow]: {message}")

    def on_nondeterministic(self, stage: str, task: str, objects: int) -> None:
        self._record("nondeterministic", stage=stage, task=task, objects=objects)
        self._line(f"[red]stage {stage}'s function is not deterministic[/red]: re-run for recovery, task {task} "
                   f"emitted other rows than its first run in {objects} output(s); it must take time only from "
                   "ctx.now / ctx.watermark and randomness only from ctx.rng")

    def on_rollback(self, record: RecoveryRecord) -> None:
        self._record("rollback", boundary=record.boundary or 0)
        cut = f"the checkpoint at step {record.boundary}" if record.boundary else "the very beginning (no checkpoint)"
        self._line(f"[yellow]rolled back[/yellow] to {cut}: every worker reopens it, and the steps after it "
                   f"replay (up to step {record.replay_to}); output already released is not written again")

    def on_control_plane(self, component: str, available: bool, message: str) -> None:
        if not available:
            self._record("pause", component=component)
        self._line(f"[{'green' if available else 'red'}]{message}[/]")

    def on_checkpoint_aborted(self, epoch: int, reason: str) -> None:
        self._line(f"[yellow]checkpoint {epoch} aborted[/yellow]: {reason}; the next one starts when due")


class ProgressObserver(LocalObserver):
    """A rich progress bar: steps committed over the total when one is known (``maxSteps``, or bounded
    sources' remaining input), else a count and a rate; rows/s, recoveries, a Kafka source's lag; and a line
    per worker joined and checkpoint."""

    def __init__(self, console: Console, total_steps: int | None,
                 ledger: FaultLedger | None = None) -> None:
        super().__init__(console, ledger)
        self.progress = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), TextColumn("{task.fields[count]}"),
            TextColumn("{task.fields[rate]}"), TextColumn("[yellow]{task.fields[info]}"), TimeElapsedColumn(),
            console=console,
        )
        self.total_steps = total_steps
        self.task: TaskID | None = None
        self.rows = 0
        self.first_step_at: float | None = None
        self.lag: int | None = None  # records a Kafka source has not read yet (none for other sources)

    def __enter__(self) -> ProgressObserver:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    watermark = ""  # the newest step's, for the bar's description (eventtime/)

    def on_workers_starting(self, workers: list[WorkerId]) -> None:
        self.task = self.progress.add_task("starting workers", total=len(workers), count=f"0/{len(workers)}",
                                           rate="", info="warming up Spark")

    def on_worker_joined(self, worker: WorkerId, ready: int, total: int) -> None:
        if self.first_step_at is None and self.task is not None:
            self.progress.update(self.task, completed=ready, count=f"{ready}/{total}")
        else:
            self._line(f"worker {worker} joined ({ready} workers)")

    def on_step_started(self, step: int, reason: Reason, rows: int) -> None:
        if self.first_step_at is None:  # the workers' bar gives way to the steps' (a total only if known)
            self.first_step_at = time.monotonic()
            if self.task is not None:
                self.progress.remove_task(self.task)
            self.task = self.progress.add_task("steps", total=self.total_steps, count=self._count(0), rate="",
                                               info="")
        assert self.task is not None
        self.progress.update(self.task, description=f"step {step} ({reason.value}{self.watermark})")

    def _count(self, committed: int) -> str:
        if self.total_steps is not None:
            return f"{committed}/{self.total_steps} steps"
        assert self.first_step_at is not None
        per_s = committed / max(time.monotonic() - self.first_step_at, 1e-9)
        return f"{committed} steps ({per_s:.1f}/s)"

    def on_watermark(self, step: int, watermark: int | None, lag_seconds: float | None) -> None:
        from ftpipeline.summary import watermark_text

        self.watermark = f", watermark {watermark_text(watermark)}" if watermark is not None else ""  # the next bar

    def on_source_lag(self, records: int) -> None:
        self.lag = records

    def on_steps_expected(self, total: int) -> None:
        """Every source ends, and where is known (a directory, a topic read to its end): a total to show."""
        self.total_steps = total
        if self.task is not None and self.first_step_at is not None:
            self.progress.update(self.task, total=total)

    def on_step_committed(self, step: int, rows: int, seconds: float) -> None:
        assert self.task is not None and self.first_step_at is not None
        self.rows += rows
        rate = self.rows / max(time.monotonic() - self.first_step_at, 1e-9)
        info = [f"{self.recoveries} recover{'y' if self.recoveries == 1 else 'ies'}"] if self.recoveries else []
        if self.lag is not None:
            info.append(f"lag {self.lag:,} records")
        self.progress.update(self.task, completed=step, count=self._count(step), rate=f"{rate:,.0f} rows/s",
                             info=", ".join(info))

    def on_checkpoint(self, info: dict[str, Any]) -> None:
        self._line(f"checkpoint {info['epoch']} committed at step {info['boundary']} in {info['seconds']:.2f} s "
                         f"({info['bytes']:,} bytes, {info['inflight']} in-flight messages)")
