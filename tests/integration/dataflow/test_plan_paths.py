"""A reused plan gives each step's rows what calling the functions on them gives.

A chain's program is run through ``dataflow/plans.py``: its plan is built on the first task's
rows (read from a Parquet scan) and run again on every later task's. These compare that with
the direct path (``createDataFrame``, the functions, ``toArrow``) with real Spark, on tables of
every type the scan takes, so a pipeline's output never depends on which path a task took; and
check the states of a template: built once per schema, not kept when the program caches, built
again after a user error, declined for types the scan does not take.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ftpipeline.dataflow.frames import to_dataframe
from ftpipeline.dataflow.plans import Plans, scannable

SCHEMA = pa.schema([
    ("user", pa.string()), ("n8", pa.int8()), ("n16", pa.int16()), ("n32", pa.int32()), ("n64", pa.int64()),
    ("f32", pa.float32()), ("f64", pa.float64()), ("flag", pa.bool_()), ("note", pa.large_string()),
    ("day", pa.date32()), ("at", pa.timestamp("us", tz="UTC")),
])

rows = st.lists(
    st.tuples(
        st.one_of(st.none(), st.sampled_from(["a", "b", "", "ü"])),
        st.one_of(st.none(), st.integers(-128, 127)),
        st.one_of(st.none(), st.integers(-(2**15), 2**15 - 1)),
        st.one_of(st.none(), st.integers(-(2**31), 2**31 - 1)),
        st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)),
        st.one_of(st.none(), st.floats(width=32)),
        st.one_of(st.none(), st.floats()),
        st.one_of(st.none(), st.booleans()),
        st.one_of(st.none(), st.text(max_size=4)),
        st.one_of(st.none(), st.dates(dt.date(1900, 1, 1), dt.date(2200, 1, 1))),
        st.one_of(st.none(), st.datetimes(dt.datetime(1900, 1, 1), dt.datetime(2200, 1, 1), timezones=st.just(dt.UTC))),
    ),
    max_size=30,
)


def _table(data: list[tuple[Any, ...]]) -> pa.Table:
    return pa.Table.from_pylist([dict(zip(SCHEMA.names, r)) for r in data], schema=SCHEMA)


def program(df: Any) -> Any:
    """Every column kept, one derived from several, a filter: what user functions do."""
    from pyspark.sql import functions as F

    return (df.withColumn("score", F.coalesce(F.col("n8"), F.lit(0)) + F.length(F.coalesce(F.col("user"), F.lit(""))))
            .withColumn("hour", F.hour(F.col("at")))
            .filter(F.col("flag").isNull() | F.col("flag")))


def _same(ours: pa.Table, theirs: pa.Table) -> None:
    assert [(f.name, f.type) for f in ours.schema] == [(f.name, f.type) for f in theirs.schema]
    assert ours.to_pylist() == theirs.to_pylist() or _same_with_nan(ours, theirs)


def _same_with_nan(ours: pa.Table, theirs: pa.Table) -> bool:
    """Equal row by row, a NaN equal to a NaN (``==`` on Python floats says it is not)."""
    def key(row: dict[str, Any]) -> list[Any]:
        return ["nan" if isinstance(v, float) and v != v else v for v in row.values()]
    return [key(r) for r in ours.to_pylist()] == [key(r) for r in theirs.to_pylist()]


@pytest.fixture(scope="module")
def plans(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Plans:
    return Plans(spark, tmp_path_factory.mktemp("scan"))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=rows)
def test_a_reused_plan_gives_what_calling_the_functions_gives(spark: Any, plans: Plans, data: list[tuple[Any, ...]]) -> None:
    table = _table(data)
    assert scannable(table.schema)
    ours = plans.run("typed", program, table)  # the first example builds the template, every other reuses it
    theirs = program(to_dataframe(spark, table)).toArrow()
    _same(ours, theirs)


def _counted() -> tuple[list[int], Any]:
    calls: list[int] = []

    def fn(df: Any) -> Any:
        from pyspark.sql import functions as F

        calls.append(1)
        return df.withColumn("double", F.col("x") * 2)
    return calls, fn


def _x(*values: int) -> pa.Table:
    return pa.table({"x": pa.array(values, pa.int64())})


def test_the_functions_are_called_once_per_schema_and_each_task_gets_its_own_rows(spark: Any, tmp_path: Path) -> None:
    plans = Plans(spark, tmp_path / "scan")
    calls, fn = _counted()
    for step in range(1, 5):
        out = plans.run("chain", fn, _x(*range(step)))
        assert out.column("double").to_pylist() == [2 * i for i in range(step)]
    wide = pa.table({"x": pa.array([7], pa.int64()), "y": pa.array(["a"])})  # a new schema: a new template
    assert plans.run("chain", fn, wide).to_pylist() == [{"x": 7, "y": "a", "double": 14}]
    assert plans.run("chain", fn, _x(5)).column("double").to_pylist() == [10]
    assert len(calls) == 2


def test_without_reuse_the_functions_are_called_for_every_task(spark: Any, tmp_path: Path) -> None:
    plans = Plans(spark, tmp_path / "scan", reuse=False)
    calls, fn = _counted()
    for step in range(1, 4):
        assert plans.run("chain", fn, _x(step)).column("double").to_pylist() == [2 * step]
    assert len(calls) == 3


def test_a_program_that_caches_is_not_reused(spark: Any, tmp_path: Path) -> None:
    """Spark's cache matches a plan, not its rows: reused, it would hand every later task the first one's."""
    plans = Plans(spark, tmp_path / "scan")
    calls: list[int] = []

    def cached(df: Any) -> Any:
        calls.append(1)
        return df.cache()
    try:
        assert plans.run("cached", cached, _x(1)).column("x").to_pylist() == [1]
        assert plans.run("cached", cached, _x(2, 3)).column("x").to_pylist() == [2, 3]
        assert len(calls) == 2
    finally:
        spark.catalog.clearCache()


def test_a_user_error_leaves_no_template(spark: Any, tmp_path: Path) -> None:
    plans = Plans(spark, tmp_path / "scan")
    failing = [True]

    def fn(df: Any) -> Any:
        if failing[0]:
            raise ValueError("bad day")
        return df
    with pytest.raises(ValueError, match="bad day"):
        plans.run("chain", fn, _x(1))
    failing[0] = False
    assert plans.run("chain", fn, _x(2)).column("x").to_pylist() == [2]
    assert plans.run("chain", fn, _x(3)).column("x").to_pylist() == [3]


def test_types_the_scan_does_not_take_call_the_functions_on_their_rows(spark: Any, tmp_path: Path) -> None:
    plans = Plans(spark, tmp_path / "scan")
    calls, fn = _counted()
    for kind in (pa.uint32(), pa.decimal128(10, 2), pa.timestamp("ns", tz="UTC"), pa.timestamp("us"),
                 pa.list_(pa.int64())):
        assert not scannable(pa.schema([("x", kind)]))
    table = pa.table({"x": pa.array([1, 2], pa.int64()), "amount": pa.array([1, 2], pa.decimal128(10, 2))})
    for _ in range(2):
        assert plans.run("decimal", fn, table).column("double").to_pylist() == [2, 4]
    assert len(calls) == 2


# --- several tasks in one job (Plans.run_many) ---------------------------------------------------

@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(parts=st.lists(rows, min_size=2, max_size=4))
def test_tasks_run_together_get_what_each_gets_alone(spark: Any, plans: Plans, parts: list[list[tuple[Any, ...]]]) -> None:
    tables = [_table(p) for p in parts]
    together = plans.run_many("typed", program, tables)
    assert together is not None and len(together) == len(tables)
    for ours, table in zip(together, tables):
        _same(ours, program(to_dataframe(spark, table)).toArrow())


def test_explode_is_row_wise_and_each_row_returns_to_its_task(spark: Any, tmp_path: Path) -> None:
    from pyspark.sql import functions as F

    plans = Plans(spark, tmp_path / "scan")

    def twice(df: Any) -> Any:
        return df.withColumn("copy", F.explode(F.array(F.lit(1), F.lit(2)))).filter(F.col("x") != 0).select("x", "copy")
    for step in range(3):
        tables = [_x(*range(step, step + 3)), _x(), _x(10 + step)]
        outs = plans.run_many("explode", twice, tables)
        assert outs is not None
        assert [t.to_pylist() for t in outs] == [twice(to_dataframe(spark, t)).toArrow().to_pylist() for t in tables]


def test_a_program_that_is_not_row_wise_is_not_grouped(spark: Any, tmp_path: Path) -> None:
    """Rows of an aggregate, a sort, a limit, a distinct or a Python UDF cannot be traced to one input file."""
    from pyspark.sql import functions as F

    plus_one = F.udf(lambda x: x + 1, "long", useArrow=False)
    plans = Plans(spark, tmp_path / "scan")
    calls, counted = _counted()
    assert plans.run_many("counted", counted, [_x(1), _x(2)]) is not None
    not_row_wise = {"aggregate": lambda df: df.groupBy("x").count(), "sort": lambda df: df.sort("x"),
                    "limit": lambda df: df.limit(1), "distinct": lambda df: df.distinct(),
                    "udf": lambda df: df.withColumn("y", plus_one("x")), "union": lambda df: df.union(df)}
    for name, fn in not_row_wise.items():
        for _ in range(2):  # the second time, the template remembers
            assert plans.run_many(name, fn, [_x(1, 2), _x(2)]) is None, name
    assert plans.run_many("counted", counted, [_x(3), _x(4)]) is not None and len(calls) == 1
