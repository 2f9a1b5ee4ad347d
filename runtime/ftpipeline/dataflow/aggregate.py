"""Keyed running aggregation: each step's partial, merged into the running state with Arrow.

Every supported aggregate (count, sum, min, max) is *mergeable*: the total
after step S is ``merge(total after S-1, partial of S)``. So a step groups
that step's rows only, and the running state — one row per key, held by the
pipeline's state backend (``state/``) — absorbs the small partial: the rows
of the keys it touches are read, merged column by column, written back. The step emits the merged rows of the keys it touched (update
mode, as Spark Structured Streaming's ``update`` output).

The partial is Arrow's hash aggregation (``partial_arrow``) whenever its
result is the one Spark's ``groupBy`` would give: integer, string, boolean
and date keys; ``sum`` of integers (to int64) and of floating point (to
double); ``min``/``max`` of integers, strings, booleans and dates. A step's
rows are already an Arrow table in the worker, so this costs a few
milliseconds where a Spark job (rows into the JVM, a shuffle, rows back)
costs a hundred: the per-step cost that made small steps slow. Any other
type (decimals, timestamps, floating-point ``min``/``max``, whose NaN Spark
orders above every number) takes Spark's ``groupBy`` (``partial``), so the
result never depends on which path ran. Stream processors do the same: the
aggregation is the engine's own keyed operator, not a batch job per step.

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
from ftpipeline.state.backend import STEP, KeyedState

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


_KEY_TYPES = (pa.types.is_signed_integer, pa.types.is_string, pa.types.is_boolean, pa.types.is_date32)
_ORDERED = _KEY_TYPES  # min/max: the same types, none with a NaN


def partial_arrow(table: pa.Table, op: AggregateOp) -> pa.Table | None:
    """``partial``'s result computed with Arrow, or None when a column's type needs Spark's rules."""
    schema = table.schema
    if not all(_has(schema, k, _KEY_TYPES) for k in op.key_by):
        return None
    specs: list[tuple[Any, str]] = [([], "count_all")]
    names, types = [ROWS], [pa.int64()]
    for agg in op.aggregations:
        if agg.op == "count":
            specs.append(([], "count_all"))
            types.append(pa.int64())
        else:
            if schema.get_field_index(str(agg.column)) < 0:
                return None  # Spark's error names the missing column
            kind = schema.field(str(agg.column)).type
            if agg.op == "sum" and pa.types.is_signed_integer(kind):
                types.append(pa.int64())
            elif agg.op == "sum" and pa.types.is_floating(kind):
                types.append(pa.float64())
            elif agg.op in ("min", "max") and _has(schema, str(agg.column), _ORDERED):
                types.append(kind)
            else:
                return None
            specs.append((str(agg.column), agg.op))
        names.append(agg.name)
    grouped = table.group_by(list(op.key_by), use_threads=False).aggregate(specs)
    keys = len(op.key_by)  # the result holds the keys, then the aggregates in the order asked
    columns = [grouped.column(i) for i in range(keys)]
    columns += [grouped.column(keys + i).cast(t) for i, t in enumerate(types)]
    return pa.Table.from_arrays(columns, names=[*op.key_by, *names])


def _has(schema: pa.Schema, name: str, types: tuple[Any, ...]) -> bool:
    i = schema.get_field_index(name)
    return i >= 0 and any(ok(schema.field(i).type) for ok in types)


def null_key_rows(table: pa.Table, op: AggregateOp) -> pa.Table:
    """The rows of ``table`` with a null in any key column."""
    return table.filter(_null_key_mask(table, op))


def _null_key_mask(table: pa.Table, op: AggregateOp) -> Any:
    mask = pc.is_null(table.column(op.key_by[0]))
    for key in op.key_by[1:]:
        mask = pc.or_(mask, pc.is_null(table.column(key)))
    return mask


def null_key_filter(op: AggregateOp) -> Any:
    from pyspark.sql import functions as F

    cond = F.col(op.key_by[0]).isNull()
    for key in op.key_by[1:]:
        cond = cond | F.col(key).isNull()
    return cond


def split_null_keys(part: pa.Table, op: AggregateOp) -> tuple[pa.Table, int]:
    """Drop partial rows with a null key; return them counted (rows of the original batch)."""
    mask = _null_key_mask(part, op)
    bad = part.filter(mask)
    return part.filter(pc.invert(mask)), int(pc.sum(bad.column(ROWS)).as_py() or 0)


def _merge_column(kind: str, a: pa.ChunkedArray, b: pa.ChunkedArray) -> pa.ChunkedArray:
    if kind in ("count", "sum"):
        both = pc.add(a, b)
        return pc.if_else(pc.is_null(a), b, pc.if_else(pc.is_null(b), a, both))
    fn = pc.min_element_wise if kind == "min" else pc.max_element_wise
    return fn(a, b, skip_nulls=True)


def state_schema(part: pa.Table, op: AggregateOp) -> pa.Schema:
    """The rows a channel's state holds: the keys, the aggregates, the step that last updated them."""
    names = [*op.key_by, *(a.name for a in op.aggregations)]
    return pa.schema([part.schema.field(n) for n in names] + [pa.field(STEP, pa.int64())])


def merge(state: KeyedState, part: pa.Table, op: AggregateOp, step: int) -> pa.Table:
    """Fold a partial into the running state; return the rows of the keys it touched.

    Only those keys are read and written (``state.get``/``put``): what a step
    costs follows the keys it touches on a backend that can (``rocksdb``).
    With a TTL, a key last updated before ``step - ttl`` starts anew, whether
    or not eviction has removed it yet: the output never depends on when
    eviction ran.
    """
    keys = list(op.key_by)
    cols = [a.name for a in op.aggregations]
    if part.num_rows == 0:
        return part.select([*keys, *cols])
    part = part.select([*keys, *cols]).cast(pa.schema([state.schema.field(n) for n in [*keys, *cols]]))
    current = state.get(part)
    alive = None
    if op.ttl_steps:  # a row last updated more than ttl steps ago is forgotten, evicted yet or not
        alive = pc.fill_null(pc.greater_equal(current.column(STEP), step - op.ttl_steps), False)
    merged = {k: part.column(k) for k in keys}
    for agg in op.aggregations:
        held = current.column(agg.name)
        if alive is not None:
            held = pc.if_else(alive, held, pa.nulls(len(held), held.type))
        merged[agg.name] = _merge_column(agg.op, part.column(agg.name), held)
    updated = pa.table(merged).cast(part.schema)
    state.put(updated.append_column(STEP, pa.array([step] * updated.num_rows, pa.int64())))
    return updated
