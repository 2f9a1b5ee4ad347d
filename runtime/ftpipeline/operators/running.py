"""The keyed running aggregate (``dataflow/aggregate.py``) as an operator: one row per key, its totals so far.

A step groups its rows (Arrow's hash aggregation, or Spark's ``groupBy``
for the types only Spark's rules give), merges the partial into the rows of
the keys it touches and emits them (update mode). Rows with a null key are
dead letters, as Spark's JSON of the row (they would have reached a Spark
function so). With a TTL the state is indexed by the step that last updated
a row, and the rows not updated for ``ttl`` steps leave it every
``EVICT_EVERY`` steps and at every checkpoint; whether a key expired
depends on the steps between its updates, so a rebuild folds its steps one
by one. Without a TTL merging is associative: a rebuild folds every kept
input as one partial.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

from ftpipeline.dataflow import aggregate as agg
from ftpipeline.dataflow.frames import to_dataframe
from ftpipeline.dataflow.sources.base import DeadLetter
from ftpipeline.operators.base import Emitted, Holder, StepContext
from ftpipeline.spec.model import AggregateOp
from ftpipeline.state.backend import STEP, KeyedState

EVICT_EVERY = 10  # steps between evictions of a state with a TTL (and at every checkpoint)


class RunningAggregate:
    def __init__(self, stage: str, op: AggregateOp, spark: Any) -> None:
        self.stage, self.op, self.spark = stage, op, spark
        self.keys = list(op.key_by)
        self.index: str | None = STEP if op.ttl_steps else None
        self.folds_at_once = not op.ttl_steps
        self.by_input = False

    def process(self, state: Holder, table: pa.Table, ctx: StepContext) -> Emitted:
        op = self.op
        partial = agg.partial_arrow(table, op)
        if partial is None:  # a type whose result only Spark's rules give (aggregate.py)
            partial = agg.partial(to_dataframe(self.spark, table), op).toArrow()
        part, nulls = agg.split_null_keys(partial, op)
        out = Emitted()
        if nulls and ctx.emit:  # through Spark, as the rows would have reached a Spark function
            for row in to_dataframe(self.spark, agg.null_key_rows(table, op)).toArrow().to_pylist():
                out.dead.append(DeadLetter(json.dumps(row, default=str), f"null key in {', '.join(op.key_by)}",
                                           ctx.where))
        held = state.get()
        if held is None:
            if part.num_rows == 0:
                out.rows = part.select([*op.key_by, *(a.name for a in op.aggregations)]) if ctx.emit else None
                return out
            held = state.create(agg.state_schema(part, op))
        updated = agg.merge(held, part, op, ctx.step)
        out.rows = updated if ctx.emit else None
        if op.ttl_steps and ctx.step % EVICT_EVERY == 0:
            out.evicted = self.evict(held, ctx.step)
        return out

    def evict(self, state: KeyedState, step: int) -> int:
        """At a checkpoint: the expired keys do not reach it."""
        return state.evict(step - self.op.ttl_steps) if self.op.ttl_steps else 0
