"""Keyed running aggregation: Spark computes each step's partial, Arrow merges it.

Every supported aggregate (count, sum, min, max) is *mergeable*: the total
after step S is ``merge(total after S-1, partial of S)``. So a step runs one
Spark ``groupBy`` over that step's rows only, and the running state — one row
per key, kept as an Arrow table in the worker's Spark process — absorbs the
small partial with an Arrow join. The step emits the merged rows of the keys
it touched (update mode, as Spark Structured Streaming's ``update`` output).

Mergeability is also what makes lineage recovery of state cheap to express:
a ``rebuild`` task folds *all* kept inputs of steps ``1..k`` with the same
single ``groupBy``, and the result equals merging k partials one by one.

Rows whose key is null cannot be merged across steps (null never equals
null in a join); they are sent to the dead-letter output instead of being
silently grouped. A hidden row count in the partial tells whether any exist,
so the common case costs no extra Spark job.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ftpipeline.spec.model import AggregateOp

ROWS = "__ftp_rows"


def partial(df: Any, op: AggregateOp) -> Any:
    """The Spark DataFrame of one batch's partial aggregates (plus the hidden row count)."""
    from pyspark.sql import functions as F

    exprs = [F.count(F.lit(1)).alias(ROWS)]
    for agg in op.aggregations:
        if agg.op == "count":
            exprs.append(F.count(F.lit(1)).alias(agg.name))
        else:
            exprs.append(getattr(F, agg.op)(F.col(str(agg.column))).alias(agg.name))
    return df.groupBy(*op.key_by).agg(*exprs)


def null_key_filter(op: AggregateOp) -> Any:
    from pyspark.sql import functions as F

    cond = F.col(op.key_by[0]).isNull()
    for key in op.key_by[1:]:
        cond = cond | F.col(key).isNull()
    return cond


def split_null_keys(part: pa.Table, op: AggregateOp) -> tuple[pa.Table, int]:
    """Drop partial rows with a null key; return them counted (rows of the original batch)."""
    mask = pc.is_null(part.column(op.key_by[0]))
    for key in op.key_by[1:]:
        mask = pc.or_(mask, pc.is_null(part.column(key)))
    bad = part.filter(mask)
    return part.filter(pc.invert(mask)), int(pc.sum(bad.column(ROWS)).as_py() or 0)


def _merge_column(kind: str, a: pa.ChunkedArray, b: pa.ChunkedArray) -> pa.ChunkedArray:
    if kind in ("count", "sum"):
        both = pc.add(a, b)
        return pc.if_else(pc.is_null(a), b, pc.if_else(pc.is_null(b), a, both))
    fn = pc.min_element_wise if kind == "min" else pc.max_element_wise
    return fn(a, b, skip_nulls=True)


def merge(state: pa.Table | None, part: pa.Table, op: AggregateOp) -> tuple[pa.Table, pa.Table]:
    """Fold a partial into the running state; return (new state, rows of the touched keys)."""
    keys = list(op.key_by)
    cols = [a.name for a in op.aggregations]
    part = part.select([*keys, *cols])
    if state is None or state.num_rows == 0:
        return part, part
    if part.num_rows == 0:
        return state, part
    joined = part.join(state, keys=keys, join_type="left outer", right_suffix="__state", coalesce_keys=True)
    merged = {k: joined.column(k) for k in keys}
    for agg in op.aggregations:
        merged[agg.name] = _merge_column(agg.op, joined.column(agg.name), joined.column(agg.name + "__state"))
    updated = pa.table(merged).cast(part.schema)
    kept = state.join(part.select(keys), keys=keys, join_type="left anti")
    new_state = pa.concat_tables([kept.select([*keys, *cols]).cast(part.schema), updated])
    return new_state, updated


def empty_state(part_schema: pa.Schema, op: AggregateOp) -> pa.Table:
    names = [*op.key_by, *(a.name for a in op.aggregations)]
    return pa.Table.from_batches([], schema=pa.schema([part_schema.field(n) for n in names]))
