"""Keyed stateful operators: what a stateful stage does with a step's rows, over the state backend.

Every keyed stateful stage kind (the running aggregate, a window, a
deduplication, an interval join of two inputs) is an :class:`~ftpipeline.operators.base.Operator`: given the step's rows, the
step's watermark and its channel's keyed state (``state/``), it answers the
rows to send on, the records it found late, and the dead letters. The
executor runs all of them the same way, in a step, in a lineage rebuild
(step by step, nothing emitted) and after a restore or a rescale, so none
wires itself into the executor; their state is checkpointed, restored and
re-partitioned by key as any other. This is Flink's operator contract
(``processElement`` with keyed state, ``onEventTime`` through timers) cut
to lockstep steps: the watermark of a step comes before its records.
"""

from __future__ import annotations

from typing import Any

from ftpipeline.operators.base import Operator
from ftpipeline.spec.model import StageSpec


def make_operator(stage: StageSpec, spark: Any, module: Any = None) -> Operator | None:
    """The operator of a keyed stateful stage (None: the stage keeps no state); ``module``: the entry point."""
    from ftpipeline.operators.dedup import Deduplicate
    from ftpipeline.operators.join import IntervalJoin
    from ftpipeline.operators.process import ProcessOperator
    from ftpipeline.operators.running import RunningAggregate
    from ftpipeline.operators.session import SessionOperator
    from ftpipeline.operators.window import WindowOperator

    if stage.deduplicate is not None:
        return Deduplicate(stage.name, stage.deduplicate)
    if stage.join is not None:
        return IntervalJoin(stage.name, stage.join)
    if stage.process is not None:
        return ProcessOperator(stage.name, stage.process, module, stage.parallelism)
    if stage.aggregate is None:
        return None
    if stage.aggregate.window is not None and stage.aggregate.window.kind == "session":
        return SessionOperator(stage.name, stage.aggregate)
    if stage.aggregate.window is not None:
        return WindowOperator(stage.name, stage.aggregate)
    return RunningAggregate(stage.name, stage.aggregate, spark)
