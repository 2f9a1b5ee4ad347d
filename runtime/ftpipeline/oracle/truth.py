"""The batch truth: a run's sinks against the same query as one batch over all of its input, with no watermark.

Why: the oracle (``expected.py``) recomputes which rows are late, which
windows close and which timers fire from the run's own recorded watermarks
with the runtime's own rules, so a rule that is wrong is wrong on both sides
and the run still "equals the oracle". The batch truth shares no rule of
the watermark: nothing is late, nothing closes until the input has ended,
then everything does. Where every record is within its declared bounds (no
record behind its channel's newest event time by more than
``maxOutOfOrderness``, a join's partners within its interval), nothing may
be late, and a streamed result must hold exactly what the batch holds —
Flink meets this, and so must a chain of event-time operators of any depth.

So: where the run found no late record, a sink that differs from the batch
truth is an error of the runtime; where it found some, the difference is
what those records would have made, and it is reported, not failed.

Compared: each sink's rows of the whole run, without their step, where
every event-time operator upstream emits final rows (a window or session in
``append`` mode, a join), and the run reached the end of its input (its
last step's watermark is the end-of-input one: every window is closed).
Not compared, with the reason said:

- a window or session in ``update`` mode: its rows are revisions;
- a deduplication within a horizon: what passes depends on when the
  watermark passes the first record of a key (in a batch, one row per key);
- a keyed function: its event-time timers fire as the watermark passes (in
  a batch, all at the end).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ftpipeline.dataflow.graph import Graph
from ftpipeline.eventtime.columns import END_OF_INPUT
from ftpipeline.oracle.expected import Expected, expected
from ftpipeline.spec.model import PipelineSpec, StageSpec

WHAT = "batch truth"


def why_not(spec: PipelineSpec, sink: str) -> str | None:
    """Why a sink's rows need not equal the batch truth (None: they must, within bounds)."""
    seen: set[str] = set()
    todo = [sink]
    while todo:
        stage = spec.stage(todo.pop())
        reason = _not_final(stage)
        if reason is not None:
            return reason
        for edge in stage.inputs:
            if edge.upstream not in seen:
                seen.add(edge.upstream)
                todo.append(edge.upstream)
    return None


def _not_final(stage: StageSpec) -> str | None:
    window = stage.aggregate.window if stage.aggregate is not None else None
    if window is not None and window.emit == "update":
        return f"stage {stage.name!r} emits updates of its windows"
    if stage.deduplicate is not None:
        return f"stage {stage.name!r} deduplicates within a horizon the watermark moves"
    if stage.process is not None:
        return f"stage {stage.name!r} is a keyed function whose timers fire as the watermark passes"
    return None


def ended(expect: Expected, steps: int) -> bool:
    """Did the run's step ``steps`` run with the end-of-input watermark (every window closed)?"""
    clock = expect.clocks.get(steps)
    return clock is not None and clock.watermark == END_OF_INPUT


def truth_frames(spark: Any, spec: PipelineSpec, steps: int, work: Path,
                 expect: Expected) -> tuple[dict[str, Any], dict[str, str]]:
    """The batch truth of each sink it applies to (without ``step``), and why the others are left out; over
    the input ``expect`` (the run's expectation) read."""
    sinks = Graph(spec).sinks()
    skipped = {s.name: r for s in sinks if (r := why_not(spec, s.name)) is not None}
    if len(skipped) == len(sinks):
        return {}, skipped
    batch = expected(spark, spec, steps, work, batch_of=expect)
    return {n: f.drop("step") for n, f in batch.sinks.items() if n not in skipped}, skipped
