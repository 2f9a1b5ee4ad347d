"""The oracle of an event-time window (``operators/window.py``), as plain PySpark over the whole input.

Every input row carries the step that read it; the run's step history gives
each step's watermark (``control/history.py``), the one thing
taken from the run, as a Kafka source's offsets are. From those alone:

- a row is late when the newest window it belongs to fires (ends, plus
  ``allowedLateness``) at or before its step's watermark; the late rows,
  with that watermark, are the expected late-data output;
- every other row is exploded into its windows (``sequence`` over the
  slides), and a (row, window) pair whose window has fired is dropped;
- ``append``: a window's row is its aggregate over all its pairs, expected
  in the first step whose watermark reaches its firing time (none: not yet
  emitted); ``update``: per step that touched it, the running aggregate
  through that step, as the running aggregate's oracle computes it.

None of the runtime's window assignment, Arrow aggregation, state or
firing is used.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ftpipeline.eventtime.order import held
from ftpipeline.oracle.files import STEP, Letter
from ftpipeline.spec.model import StageSpec

WM, TS, LAST, START, RID = "_wm", "_ts", "_last", "_start", "_rid"
EARLY = "_early"   # the row came before its step's advance (``eventtime/order.py``): judged by the watermark before
BEFORE = "_before"


class Marks(dict[int, "int | None"]):
    """Each step's recorded watermark, and (``before``) the watermark of the step before it, which a row that
    came before the step's advance is judged against (``eventtime/order.py``)."""

    def __init__(self, at: Mapping[int, int | None], before: Mapping[int, int | None] | None = None) -> None:
        super().__init__(at)
        self.before: dict[int, int | None] = dict(before) if before is not None else dict(at)


def held_marks(marks: Mapping[int, int | None], by_us: int) -> Marks:
    """``marks`` as a stage takes them whose watermark the joins upstream hold back by ``by_us``."""
    return Marks({s: held(m, by_us) for s, m in marks.items()},
                 {s: held(m, by_us) for s, m in befores(marks).items()})


def befores(marks: Mapping[int, int | None]) -> Mapping[int, int | None]:
    return marks.before if isinstance(marks, Marks) else marks


def phase(step: Any, early: Any) -> Any:
    """Where a row falls in the run: a step's early rows, then its rows after the advance (a Spark column)."""
    from pyspark.sql import functions as F

    return F.col(step) * 2 + F.when(early, 0).otherwise(1)


def kinded(df: Any) -> Any:
    """``df`` with ``EARLY`` (false where an operator upstream did not set it)."""
    from pyspark.sql import functions as F

    return df if EARLY in df.columns else df.withColumn(EARLY, F.lit(False))


def windowed(spark: Any, df: Any, stage: StageSpec, marks: dict[int, int | None],
             letters: list[Letter]) -> tuple[Any, Any]:
    """(the stage's expected output with a ``STEP`` column, its expected late rows with one)."""
    from pyspark.sql import functions as F

    op = stage.aggregate
    assert op is not None and op.window is not None
    w = op.window
    df, steps = marked(spark, placed(df, op.key_by, w.time_column, stage.name, letters), marks)
    df = df.withColumn(LAST, F.col(TS) - F.pmod(F.col(TS), F.lit(w.slide_us)))
    reach = w.size_us + w.allowed_lateness_us
    is_late = F.col(WM).isNotNull() & (F.col(LAST) + reach <= F.col(WM))
    late = late_of(df, is_late)
    pairs = df.filter(~is_late).withColumn("_j", F.explode(F.sequence(F.lit(0), F.lit(w.size_us // w.slide_us - 1))))
    pairs = pairs.withColumn(START, F.col(LAST) - F.col("_j") * w.slide_us)
    pairs = pairs.filter(F.col(WM).isNull() | (F.col(START) + reach > F.col(WM)))
    keys = [*op.key_by, START]
    if w.emit == "append":  # what the watermark's advance emits: early downstream
        windows = pairs.groupBy(*keys).agg(*[_whole(a.op, a.name, a.column) for a in op.aggregations])
        fired = steps.filter(F.col(WM).isNotNull())
        firing = windows.join(F.broadcast(fired), F.col(WM) >= F.col(START) + reach) \
            .groupBy(*keys).agg(F.min(STEP).alias(STEP))
        out = windows.join(firing, keys).withColumn(EARLY, F.lit(True))
        aggs = [F.col(a.name) for a in op.aggregations]
    else:  # per step, the windows its early rows touched (early), then those its rows after touched
        from pyspark.sql import Window

        pairs = pairs.withColumn("_phase", phase(STEP, F.col(EARLY)))
        partial = pairs.groupBy(*keys, "_phase").agg(*[p for a in op.aggregations
                                                       for p in _parts(a.op, a.name, a.column)])
        running = Window.partitionBy(*keys).orderBy("_phase").rowsBetween(Window.unboundedPreceding,
                                                                          Window.currentRow)
        out = partial.select(*keys, (F.col("_phase") / 2).cast("int").alias(STEP),
                             (F.col("_phase") % 2 == 0).alias(EARLY),
                             *[_running(a.op, a.name, running).alias(a.name) for a in op.aggregations])
        aggs = [F.col(a.name) for a in op.aggregations]
    out = out.select(*op.key_by, F.timestamp_micros(F.col(START)).alias("window_start"),
                     F.timestamp_micros(F.col(START) + w.size_us).alias("window_end"), *aggs, STEP, EARLY)
    return out, late


def marked(spark: Any, df: Any, marks: Mapping[int, int | None]) -> tuple[Any, Any]:
    """``df`` (with ``EARLY``) with the watermark each row is judged against (``WM``): its step's, or for a
    row before the step's advance the one before; and the steps with their watermarks."""
    from pyspark.sql import functions as F

    before = befores(marks)
    steps = spark.createDataFrame([(int(s), m, before.get(s, m)) for s, m in sorted(marks.items())],
                                  f"{STEP} int, {WM} long, {BEFORE} long")
    df = kinded(df).join(F.broadcast(steps), STEP, "left")
    df = df.withColumn(WM, F.when(F.col(EARLY), F.col(BEFORE)).otherwise(F.col(WM))).drop(BEFORE)
    return df, steps.drop(BEFORE)


def late_of(df: Any, is_late: Any) -> Any:
    """The late rows as the late-data output holds them: their columns and the watermark they missed."""
    from pyspark.sql import functions as F

    originals = [c for c in df.columns if c not in (TS, LAST, WM, EARLY)]
    return df.filter(is_late).select(*originals, F.timestamp_micros(F.col(WM)).alias("late_watermark"))


def placed(df: Any, keys: Sequence[str], time_column: str, stage: str, letters: list[Letter]) -> Any:
    """The rows with every key and an event time, the latter as ``TS`` (us); the others to ``letters``, as the
    runtime's ``operators/rows.py`` sends them to the dead letters."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import TimestampType

    column = F.col(time_column)
    timestamp = isinstance(df.schema[time_column].dataType, TimestampType)
    df = df.withColumn(TS, F.unix_micros(column) if timestamp else column.cast("long") * 1000)
    bad = F.col(TS).isNull()
    for k in keys:
        bad = bad | F.col(k).isNull()
    for row in df.filter(bad).drop(TS, EARLY).toArrow().to_pylist():
        letters.append(Letter(stage, int(row[STEP]), stage, json.dumps(row, default=str)))
    return df.filter(~bad)


def _whole(op: str, name: str, column: str | None) -> Any:
    from pyspark.sql import functions as F

    if op == "count":
        return F.count(F.lit(1)).alias(name)
    if op == "countDistinct":
        return F.count_distinct(F.col(str(column))).alias(name)
    if op in ("first", "last"):
        value = F.col(str(column))
        pick = F.min if op == "first" else F.max
        return pick(F.when(value.isNotNull(), F.struct(F.col(TS).alias("t"), value.alias("v")))).getField("v").alias(name)
    return getattr(F, op)(F.col(str(column))).alias(name)


def _parts(op: str, name: str, column: str | None) -> list[Any]:
    from pyspark.sql import functions as F

    if op == "avg":
        return [F.sum(F.col(str(column))).alias(f"{name}__s"), F.count(F.col(str(column))).alias(f"{name}__n")]
    if op == "countDistinct":
        return [F.collect_set(F.col(str(column))).alias(name)]
    if op in ("first", "last"):
        value = F.col(str(column))
        pick = F.min if op == "first" else F.max
        return [pick(F.when(value.isNotNull(), F.struct(F.col(TS).alias("t"), value.alias("v")))).alias(name)]
    return [_whole(op, name, column)]


def _running(op: str, name: str, over: Any) -> Any:
    from pyspark.sql import functions as F

    if op == "avg":
        n = F.sum(F.col(f"{name}__n")).over(over)
        return F.when(n > 0, F.sum(F.col(f"{name}__s")).over(over).cast("double") / n)
    if op in ("first", "last"):
        pick = F.min if op == "first" else F.max
        return pick(F.col(name)).over(over).getField("v")
    if op == "countDistinct":  # the values of every step so far, each once
        return F.size(F.array_distinct(F.flatten(F.collect_list(F.col(name)).over(over)))).cast("long")
    merge = {"count": F.sum, "sum": F.sum, "min": F.min, "max": F.max}[op]
    return merge(F.col(name)).over(over)
