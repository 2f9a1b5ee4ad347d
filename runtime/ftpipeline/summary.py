"""The figures a run ends with: the table ``ftpipeline run`` prints, and the JSON of ``--summary-json``.

Each input row and dead letter counts once (``coordinator/tally.py``), and
every fault counts, this run's and, after a ``--resume``, the runs' before it
(``progress.FaultLedger``).
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from ftpipeline.coordinator.coordinator import RunResult
from ftpipeline.dataflow.deadletter import default_dead_letter_root
from ftpipeline.eventtime.columns import END_OF_INPUT
from ftpipeline.obs.errors import redacted
from ftpipeline.obs.spans import busy_seconds, step_spans
from ftpipeline.spec.model import PipelineSpec


def print_summary(console: Console, spec: PipelineSpec, result: RunResult, earlier: dict[str, int]) -> None:
    """The run's figures: each input row and dead letter once, and every fault, this run's and those of the
    runs it resumed (``earlier``: the fault ledger's counts before it)."""
    table = Table(title=f"{spec.name}: {result.committed} steps committed", show_header=False)
    table.add_column(no_wrap=True)
    table.add_column(overflow="fold")  # a path too long for the terminal wraps; it is never cut
    rate = result.source_rows / max(busy_seconds(step_spans(result.commit_at, result.step_seconds)), 1e-9)
    table.add_row("rows read", f"{result.source_rows:,} ({rate:,.0f} rows/s over the steps)")
    table.add_row("wall time", f"{result.seconds:.1f} s")

    def before(kind: str) -> str:
        return f" ({earlier[kind]} before the resume)" if earlier.get(kind) else ""

    table.add_row("recoveries", f"{len(result.recoveries) + earlier.get('recovery', 0)}{before('recovery')}")
    for r in result.recoveries:
        to_commit = f"{r.to_commit_seconds:.2f} s" if r.to_commit_seconds is not None else "n/a"
        table.add_row(f"  lost {r.worker}", f"{r.strategy}: {r.seconds * 1000:.0f} ms, {len(r.tasks)} tasks, next commit "
                                            f"after {to_commit}, {r.buffered_rows:,} rows were buffered there")
    for r in result.evacuations:
        table.add_row(f"  evacuated {r.worker}", f"asked to leave: {len(r.moves)} channels handed over in "
                                                 f"{r.seconds * 1000:.0f} ms, {len(r.rebuilt)} rebuilt from its snapshots")
    rollbacks = len(result.rollbacks) + earlier.get("rollback", 0)
    if rollbacks:
        table.add_row("rollbacks", f"{rollbacks}{before('rollback')} (Redis came back empty)")
    pauses = len(result.outages) + earlier.get("pause", 0)
    table.add_row("control-plane pauses", f"{pauses}{before('pause')}")
    for o in result.outages:
        table.add_row(f"  {o['component']}", f"{o['seconds']:.2f} s out of reach, then {o['outcome']}")
    if result.checkpoints:
        last = result.checkpoints[-1]
        table.add_row("checkpoints", f"{len(result.checkpoints)} committed, newest at step {last['boundary']} "
                                     f"({last['bytes']:,} bytes)")
    table.add_row("rows re-processed by recovery", f"{result.stats.get('recomputed_rows', 0):,}")
    dead = result.dead_letters
    table.add_row("dead letters", f"{dead:,}" + (f" -> {default_dead_letter_root(spec)}" if dead else ""))
    if spec.event_time:
        table.add_row("late records", f"{result.late_records:,}")
        for name, n in sorted(result.late_by_stage.items()):
            if not n or name not in {s.name for s in spec.stages}:
                continue
            kept = spec.stage(name)
            where = (f" -> {kept.late_data}" if kept.late_data is not None else
                     f" -> topic {kept.late_topic}" if kept.late_topic is not None else " (dropped: no lateData)")
            table.add_row(f"  of stage {name}", f"{n:,}{where}")
        table.add_row("watermark", watermark_text(result.watermark))
    for stage in spec.stages:
        if stage.sink is not None:
            table.add_row(f"sink {stage.name}", str(stage.sink.path))
        elif stage.kafka_sink is not None:
            table.add_row(f"sink {stage.name}", f"topic {stage.kafka_sink.topic} at {redacted(spec.kafka_bootstrap)}")
        elif stage.delta_sink is not None:
            table.add_row(f"sink {stage.name}", f"Delta table {stage.delta_sink.path}")
    console.print(table)


def watermark_text(watermark: int | None) -> str:
    """The last step's watermark as a person reads it."""
    import datetime

    if watermark is None:
        return "none yet (a source channel has read no event time)"
    if watermark == END_OF_INPUT:
        return "end of input (every window final)"
    return datetime.datetime.fromtimestamp(watermark / 1e6, datetime.timezone.utc).isoformat(timespec="milliseconds")


def result_json(result: RunResult) -> dict[str, Any]:
    return {
        "committed": result.committed,
        "source_rows": result.source_rows,
        "dead_letters": result.dead_letters,
        "late_records": result.late_records,
        "late_by_stage": result.late_by_stage,
        "watermark": result.watermark,
        "rollbacks": [{**r.summary(), "to_commit_seconds": r.to_commit_seconds} for r in result.rollbacks],
        "seconds": result.seconds,
        "step_seconds": result.step_seconds,
        "stats": result.stats,
        "tasks_by_worker": result.tasks_by_worker,
        "joins": result.joins,
        "checkpoints": result.checkpoints,
        "outages": result.outages,
        "buffers": result.buffers,
        "commit_at": result.commit_at,
        "phases": result.phases,
        "recoveries": [{**r.summary(), "to_commit_seconds": r.to_commit_seconds} for r in result.recoveries],
        "evacuations": [r.summary() for r in result.evacuations],
    }
