"""Arrow's partial aggregate is Spark's: the same rows, the same types, or it declines.

A step's partial is computed with Arrow when its types allow (``dataflow/aggregate.py``); every
other case goes to Spark's ``groupBy``. These compare the two on the same tables with real Spark,
so a pipeline's state and output never depend on which path a task took.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ftpipeline.dataflow import aggregate as agg
from ftpipeline.dataflow.frames import to_dataframe
from ftpipeline.spec.model import AggregateOp, Aggregation

OP = AggregateOp(
    ("user", "day"),
    (
        Aggregation("n", "count"),
        Aggregation("total", "sum", "amount"),
        Aggregation("spent", "sum", "price"),
        Aggregation("first", "min", "item"),
        Aggregation("last", "max", "qty"),
        Aggregation("any", "max", "flag"),
    ),
)
SCHEMA = pa.schema([
    ("user", pa.string()), ("day", pa.int32()), ("amount", pa.int32()), ("price", pa.float64()),
    ("item", pa.string()), ("qty", pa.int16()), ("flag", pa.bool_()),
])

rows = st.lists(
    st.tuples(
        st.one_of(st.none(), st.sampled_from(["a", "b", "c"])),
        st.one_of(st.none(), st.integers(0, 2)),
        st.one_of(st.none(), st.integers(-1000, 1000)),
        st.one_of(st.none(), st.floats(-1e6, 1e6, allow_nan=False)),
        st.one_of(st.none(), st.text("xyz", max_size=3)),
        st.one_of(st.none(), st.integers(-5, 5)),
        st.one_of(st.none(), st.booleans()),
    ),
    max_size=40,
)


def _table(data: list[tuple[Any, ...]]) -> pa.Table:
    return pa.Table.from_pylist([dict(zip(SCHEMA.names, r)) for r in data], schema=SCHEMA)


def _by_key(table: pa.Table, keys: int) -> dict[tuple[Any, ...], tuple[Any, ...]]:
    out = {}
    for r in table.to_pylist():
        values = tuple(r.values())
        out[values[:keys]] = tuple(round(v, 6) if isinstance(v, float) else v for v in values[keys:])
    return out


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=rows)
def test_arrows_partial_equals_sparks(spark: Any, data: list[tuple[Any, ...]]) -> None:
    table = _table(data)
    ours = agg.partial_arrow(table, OP)
    theirs = agg.partial(to_dataframe(spark, table), OP).toArrow()
    assert ours is not None
    assert ours.schema.names == theirs.schema.names
    assert [f.type for f in ours.schema] == [f.type for f in theirs.schema]
    assert _by_key(ours, 2) == _by_key(theirs, 2)
