"""A row-wise plan on Arrow compute gives what Spark gives, or gives up and lets Spark answer.

``dataflow/arrow_plans.py`` evaluates a program's optimised plan with Arrow compute instead of
a Spark job. Each program here touches a family of the expressions it translates; on random
tables of every type a task's rows take (nulls, extreme integers, NaN, infinities, empty and
non-ASCII text) its result is compared with real Spark's on the same rows, in ANSI mode (Spark
4's default) and in legacy mode. Where the evaluation gives up (an overflow, a division by zero,
a NaN compared) Spark must be the one that raises or answers. Programs it must not translate
(a time function, a random number, a Python UDF, a generator) are refused; and ``Plans`` runs a
compiled program without a Spark job, and falls back to Spark for the rows that need it.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings

from ftpipeline.dataflow.arrow_plans import Fallback, NotNative, compile_plan
from ftpipeline.dataflow.plans import Plans

from .test_plan_paths import _same, _table, rows

_files = itertools.count()


def arithmetic(df: Any) -> Any:
    from pyspark.sql import functions as F

    return df.select(
        (F.col("n32") + F.col("n16")).alias("add"), (F.col("n8") - F.col("n32")).alias("sub"),
        (F.col("n64") * 2).alias("mul"), (F.col("f64") / F.col("f32")).alias("fdiv"),
        (F.col("n64") / 3).alias("div3"), (F.col("f64") / F.col("n32")).alias("div0"),
        (-F.col("n32")).alias("neg"), F.abs(F.col("n16")).alias("abs"),
        F.floor(F.col("f64") / 7).alias("floor"), F.ceil(F.col("n32") / 2).alias("ceil"),
        (F.col("f32") * F.col("f32")).alias("f32sq"))


def logic(df: Any) -> Any:
    from pyspark.sql import functions as F

    return df.select(
        (F.col("flag") & (F.col("n32") > 0)).alias("both"), (~F.col("flag") | (F.col("user") == "a")).alias("either"),
        (F.col("n64") >= F.col("n32")).alias("ge"), (F.col("f64") < 1.5).alias("lt"),
        F.col("user").eqNullSafe(F.col("note")).alias("nse"), F.isnull(F.col("f32")).alias("isnull"),
        F.isnan(F.col("f64")).alias("isnan"), F.col("user").isin("a", "b").alias("small_in"),
        F.col("n32").isin(*range(12)).alias("inset"),
        F.when(F.col("n8") > 10, "big").when(F.col("n8") < -10, "small").alias("size"),
        F.when(F.col("flag"), F.col("n16")).otherwise(F.col("n8")).alias("picked"),
        F.coalesce(F.col("n8"), F.col("n16"), F.lit(1)).alias("first"),
        F.expr("if(flag, n32, n16)").alias("iff"), F.col("flag").cast("long").alias("one"),
        F.col("flag").cast("double").alias("real"))


def text(df: Any) -> Any:
    from pyspark.sql import functions as F

    return df.select(
        F.upper(F.col("user")).alias("up"), F.lower(F.col("note")).alias("low"), F.length(F.col("note")).alias("len"),
        F.concat(F.col("user"), F.lit("-"), F.col("note")).alias("both"),
        F.col("user").startswith("a").alias("sw"), F.col("note").endswith("x").alias("ew"),
        F.col("note").contains("b").alias("has"))


def filtered(df: Any) -> Any:
    from pyspark.sql import functions as F

    return (df.filter((F.col("n32") > 5) | F.col("flag")).filter(F.col("user") != "b")
            .withColumn("twice", F.col("n16") * 2).dropna(subset=["f64", "user"]).select("user", "twice", "f64", "day", "at"))


PROGRAMS = [arithmetic, logic, text, filtered]


@pytest.fixture(scope="module")
def scans(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("arrow-plans")


def _scan(spark: Any, scans: Path, table: pa.Table) -> Any:
    path = scans / f"t{next(_files)}.parquet"
    pq.write_table(table, path)
    return spark.read.parquet(str(path))


def _compare(spark: Any, scans: Path, program: Callable[[Any], Any], table: pa.Table) -> str:
    """``program`` on ``table`` both ways: 'same', or 'fallback' when ours gave up (Spark then raised
    or answered: either is Spark's own result)."""
    out = program(_scan(spark, scans, table))
    native = compile_plan(out)
    try:
        theirs = out.toArrow()
    except Exception:  # Spark raised (an overflow, a division by zero in ANSI mode): ours must give up
        theirs = None
    try:
        ours = native(table)
    except Fallback:
        return "fallback"
    assert theirs is not None, f"{program.__name__}: Spark raised, Arrow compute answered"
    native.schema = theirs.schema
    _same(native(table), theirs)
    assert ours.num_rows == theirs.num_rows
    return "same"


@pytest.fixture
def legacy(spark: Any) -> Iterator[None]:
    spark.conf.set("spark.sql.ansi.enabled", "false")
    try:
        yield
    finally:
        spark.conf.set("spark.sql.ansi.enabled", "true")


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=rows)
def test_every_expression_gives_sparks_values(spark: Any, scans: Path, data: list[tuple[Any, ...]]) -> None:
    table = _table(data)
    for program in PROGRAMS:
        _compare(spark, scans, program, table)


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=rows)
def test_legacy_mode_wraps_and_divides_by_zero_to_null(spark: Any, scans: Path, legacy: None,
                                                       data: list[tuple[Any, ...]]) -> None:
    _compare(spark, scans, arithmetic, _table(data))


def test_edge_values_are_left_to_spark(spark: Any, scans: Path, legacy: None) -> None:
    """Legacy mode: an overflow wraps, a zero divisor gives null, both computed here, not given up."""
    table = _table([("a", 1, 2, 0, 2**62, 1.0, 2.0, True, "x", None, None)])
    assert _compare(spark, scans, arithmetic, table) == "same"


def test_ansi_errors_are_sparks_own(spark: Any, scans: Path) -> None:
    overflow = _table([("a", 1, 2, 3, 2**62, 1.0, 2.0, True, "x", None, None)])
    zero = _table([("a", 1, 2, 0, 5, 1.0, 2.0, True, "x", None, None)])
    nan = _table([("a", 1, 2, 3, 5, 1.0, float("nan"), True, "x", None, None)])
    assert _compare(spark, scans, arithmetic, overflow) == "fallback"
    assert _compare(spark, scans, arithmetic, zero) == "fallback"
    assert _compare(spark, scans, logic, nan) == "fallback"
    plain = _table([("a", 1, 2, 3, 5, 1.0, 2.0, True, "x", None, None)])
    assert all(_compare(spark, scans, p, plain) == "same" for p in PROGRAMS)


def test_programs_it_cannot_mimic_are_refused(spark: Any, scans: Path) -> None:
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType

    df = _scan(spark, scans, _table([("a", 1, 2, 3, 5, 1.0, 2.0, True, "x", None, None)]))
    refused = [df.withColumn("h", F.hour("at")), df.withColumn("r", F.rand()), df.withColumn("today", F.current_date()),
               df.withColumn("u", F.udf(lambda v: v, LongType(), useArrow=False)("n64")), df.withColumn("c", F.explode(F.array("n8", "n16"))),
               df.groupBy("user").count(), df.withColumn("d", F.col("n64").cast("decimal(20,2)"))]
    for out in refused:
        with pytest.raises(NotNative):
            compile_plan(out)


def test_plans_run_compiled_programs_without_a_spark_job(spark: Any, tmp_path: Path) -> None:
    from pyspark.errors import ArithmeticException

    plans = Plans(spark, tmp_path / "scan")
    first = _table([("a", 1, 2, 3, 5, 1.0, 2.0, True, "x", None, None)] * 3)
    plans.run("arith", arithmetic, first)
    jobs = plans.jobs
    again = plans.run("arith", arithmetic, _table([("b", 4, 5, 6, 7, 1.5, 3.0, False, "y", None, None)]))
    assert (plans.jobs, plans.native) == (jobs, 1) and again.column("add").to_pylist() == [11]
    with pytest.raises(ArithmeticException):  # a zero divisor: Spark's own DIVIDE_BY_ZERO, from a Spark job
        plans.run("arith", arithmetic, _table([("b", 4, 5, 0, 7, 1.5, 3.0, False, "y", None, None)]))
    assert (plans.jobs, plans.native) == (jobs + 1, 1)
    grouped = plans.run_many("arith", arithmetic, [first, first])  # grouped for the first time: the checked
    assert grouped is not None and [t.num_rows for t in grouped] == [3, 3]  # program of one task, no Spark job
    assert (plans.jobs, plans.native) == (jobs + 1, 3)
    assert grouped[0].equals(Plans(spark, tmp_path / "fresh").run("arith", arithmetic, first))
    more = plans.run_many("arith", arithmetic, [first, first])
    assert more is not None and plans.native == 5 and more[0].equals(grouped[0])
    chunked = pa.concat_tables([first, first.slice(1)])  # a task's input: several IPC batches
    assert plans.run("arith", arithmetic, chunked).equals(pa.concat_tables([again.slice(0, 0), grouped[0], grouped[0].slice(1)]))


def test_a_warmed_plan_is_checked_on_the_first_tasks_rows_before_it_runs_on_arrow(spark: Any, tmp_path: Path) -> None:
    """``Plans.warm`` builds a stream's plan before its first records; an empty table proves nothing about
    the translation, so the first task still runs in Spark and is compared."""
    plans = Plans(spark, tmp_path / "scan")
    first = _table([("a", 1, 2, 3, 5, 1.0, 2.0, True, "x", None, None)] * 3)
    assert plans.warm("arith", arithmetic, first.slice(0, 0))
    jobs = plans.jobs
    assert plans.run("arith", arithmetic, first).equals(Plans(spark, tmp_path / "fresh").run("arith", arithmetic, first))
    assert (plans.jobs, plans.native) == (jobs + 1, 0)  # the first task: Spark's answer, and the check
    plans.run("arith", arithmetic, first)
    assert (plans.jobs, plans.native) == (jobs + 1, 1)  # then Arrow compute
    assert not plans.warm("arith", arithmetic, first.slice(0, 0)), "a plan is built once"

    def broken(df: Any) -> Any:
        raise ValueError("a user's bug")

    assert not plans.warm("broken", broken, first.slice(0, 0))  # the first task meets it, as its own failure
    with pytest.raises(ValueError, match="a user's bug"):
        plans.run("broken", broken, first)
