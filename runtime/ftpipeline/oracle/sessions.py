"""The oracle of session windows (``operators/session.py``): PySpark places the rows, then a plain replay.

A session depends on the order the steps delivered its records in: one that
fired is final, and a record after it opens a new session even where a
batch sessionization would have joined it to the fired one (as in Spark's
and Flink's streaming session windows). So the expected sessions are not a
single batch ``session_window``; they are a replay of each key's records,
step by step, with the watermark the run recorded for each step (its step
history, the one thing taken from the run):

- Spark drops the rows without a key or event time (dead letters, as for
  every window) and marks as late a row whose own session ``[t, t + gap)``
  ends, plus ``allowedLateness``, at or before its step's watermark;
- per key (Spark groups the on-time rows), each step's records are added
  as intervals, merging the open sessions they touch; a session fires at the
  first step, at or after the one that last changed it, whose watermark
  reaches its end plus the lateness (the watermark comes before a step's
  records: a session their step fires takes none of them); ``append`` expects it in that step,
  ``update`` expects every session a step touched in that step, with its
  aggregates over all its records so far.

Plain Python over rows, one record at a time: none of the runtime's Arrow
cutting, interval merging, state or firing is used.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from datetime import datetime, timedelta, timezone
from typing import Any

from ftpipeline.oracle.files import STEP, Letter
from ftpipeline.oracle.windows import EARLY, TS, WM, late_of, marked, placed
from ftpipeline.spec.model import AggregateOp, StageSpec

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def sessionized(spark: Any, df: Any, stage: StageSpec, marks: Mapping[int, int | None],
                letters: list[Letter]) -> tuple[Any, Any]:
    """(the stage's expected output with a ``STEP`` column, its expected late rows with one)."""
    from pyspark.sql import functions as F

    op = stage.aggregate
    assert op is not None and op.window is not None
    w = op.window
    df, _ = marked(spark, placed(df, op.key_by, w.time_column, stage.name, letters), marks)
    is_late = F.col(WM).isNotNull() & (F.col(TS) + (w.gap_us + w.allowed_lateness_us) <= F.col(WM))
    late = late_of(df, is_late)
    values = sorted({str(a.column) for a in op.aggregations if a.column})
    rows = df.filter(~is_late).groupBy(*op.key_by).agg(
        F.collect_list(F.struct(F.col(STEP).alias("s"), F.col(TS).alias("t"), F.col(EARLY).alias("e"),
                                *[F.col(v) for v in values])).alias("_rows"))
    expected = [out for key in rows.toLocalIterator() for out in _replay(op, key, marks)]
    schema = _schema(df, op)
    out = spark.createDataFrame(expected, schema) if expected else spark.createDataFrame([], schema)
    return out, late


def _replay(op: AggregateOp, key: Any, marks: Mapping[int, int | None]) -> Iterator[tuple[Any, ...]]:
    assert op.window is not None
    gap, lateness, emit = op.window.gap_us, op.window.allowed_lateness_us, op.window.emit
    ordered = sorted(s for s in marks)
    by_step: dict[int, list[Any]] = {}
    for r in sorted(key["_rows"], key=lambda r: not r["e"]):  # a step's rows before its advance first
        by_step.setdefault(int(r["s"]), []).append(r)
    head = tuple(key[k] for k in op.key_by)
    open_: list[dict[str, Any]] = []   # {start, end, rows, changed}

    def fires(session: dict[str, Any], until: int | None) -> Iterator[tuple[int, dict[str, Any]]]:
        """The step a session fires in, up to ``until`` (None: any): the first whose watermark reaches its end
        plus the lateness, from the one its early rows changed it in, or the one after its rows after the
        advance did (the watermark comes before those)."""
        first = session["changed"] + (0 if session["by"] else 1)
        for s in ordered:
            if s < first or (until is not None and s > until):
                continue
            mark = marks[s]
            if mark is not None and mark >= session["end"] + lateness:
                yield s, session
                return

    def fire(until: int | None) -> Iterator[tuple[Any, ...]]:
        for at, session in [f for session in list(open_) for f in fires(session, until)]:
            open_.remove(session)
            if emit == "append":
                yield _row(op, head, session, at, True)

    for step in sorted(by_step):
        yield from fire(step - 1)
        for early in (True, False):  # the rows before the step's advance, then the others (eventtime/order.py)
            if not early:
                yield from fire(step)  # the advance to the step's watermark, before its rows after it
            kind = [r for r in by_step[step] if bool(r["e"]) == early]
            for r in kind:
                mine = {"start": r["t"], "end": r["t"] + gap, "rows": [r], "changed": step, "by": early}
                for other in list(open_):
                    if other["start"] <= mine["end"] and mine["start"] <= other["end"]:
                        open_.remove(other)
                        mine = {"start": min(other["start"], mine["start"]), "end": max(other["end"], mine["end"]),
                                "rows": other["rows"] + mine["rows"], "changed": step, "by": early}
                open_.append(mine)
            if emit == "update" and kind:
                for session in open_:
                    if session["changed"] == step and session["by"] == early:
                        yield _row(op, head, session, step, early)
    yield from fire(None)


def _row(op: AggregateOp, head: tuple[Any, ...], session: dict[str, Any], step: int, early: bool) -> tuple[Any, ...]:
    rows = session["rows"]
    values: list[Any] = []
    for a in op.aggregations:
        if a.op == "count":
            values.append(len(rows))
            continue
        present = [(r["t"], r[str(a.column)]) for r in rows if r[str(a.column)] is not None]
        if a.op == "countDistinct":
            values.append(len({str(v) for _, v in present}))
        elif not present:
            values.append(None)
        elif a.op == "sum":
            values.append(sum(v for _, v in present))
        elif a.op == "min":
            values.append(min(v for _, v in present))
        elif a.op == "max":
            values.append(max(v for _, v in present))
        elif a.op == "avg":
            values.append(sum(float(v) for _, v in present) / len(present))
        else:
            values.append((min if a.op == "first" else max)(present)[1])
    return (*head, _time(session["start"]), _time(session["end"]), *values, step, early)


def _time(us: int) -> datetime:
    return EPOCH + timedelta(microseconds=us)


def _schema(df: Any, op: AggregateOp) -> Any:
    from pyspark.sql.types import (BooleanType, DoubleType, IntegerType, LongType, StructField, StructType,
                                   TimestampType)

    fields = [df.schema[k] for k in op.key_by]
    fields += [StructField("window_start", TimestampType()), StructField("window_end", TimestampType())]
    for a in op.aggregations:
        if a.op in ("count", "countDistinct"):
            fields.append(StructField(a.name, LongType()))
        elif a.op == "avg":
            fields.append(StructField(a.name, DoubleType()))
        elif a.op == "sum":
            kind = df.schema[str(a.column)].dataType
            fields.append(StructField(a.name, LongType() if kind.typeName() in ("integer", "long", "short", "byte")
                                      else DoubleType()))
        else:
            fields.append(StructField(a.name, df.schema[str(a.column)].dataType))
    return StructType([*fields, StructField(STEP, IntegerType()), StructField(EARLY, BooleanType())])
