"""Spark Structured Streaming twins of the chained event-time tests (``test_chains.py``) and of the examples'
windows and sessions (``test_windows.py``, ``test_sessions.py``): the same query written for SS, fed micro-batch
for micro-batch with the steps the run read (one Parquet file a step, one file a batch), and its output compared
with the run's on what both finalized.

SS keeps a watermark per stateful operator (3.4 on) and judges a batch's rows against the one of the batch
before, so a window of windows keeps every minute there too, and (3.5 on) holds the watermark a join passes on
back by its interval, so a window of a left join counts every impression. The differences, each named where it
shows:

- SS's chained window reads the first window's ``window_time`` (its end less a microsecond: SS accepts only a
  column that carries the watermark), where the run's reads ``window_start`` (of a minute) or ``window_end``
  (of a session); a minute falls in the same five-minute window either way, and a session's end less a
  microsecond in its end's ten-minute window unless it ends on the boundary itself (none does here);
- SS merges a batch's rows into its sessions before the watermark closes them, Flink and the run close them
  first; within the bounds no row can touch a session the step's watermark closes, so it shows only on late
  input;
- SS's deduplication keeps a key for the watermark's delay, the run's for ``within`` (the twin sets both
  equal), and SS lets the keys a batch's watermark expires go after the batch's rows, the run (as a Flink timer
  would) before the step's: SS keeps each key one batch longer and passes fewer repeats, which the test shows
  by a rule written for each; of a key's rows in one batch SS passes the first read, the run the earliest in
  event time (the same row when a key's rows are read in event-time order, as the test's are);
- SS has no exact distinct count in a stream (``approx_count_distinct`` only): a join of two windows compares
  the pairs and the counts, not the distinct users;
- SS (4.x) refuses a chain whose keyed function emits, from a timer, rows behind the watermark that fired it
  (``EMITTING_ROWS_OLDER_THAN_WATERMARK_NOT_ALLOWED`` from ``transformWithStateInPandas``, tried on the
  timers -> window chain): Flink counts them, as the run does, so that chain's checks are the count written
  in its test and the reference interpreter (``oracle/reference.py``), not a twin;
- SS runs a keyed function's rows of a batch before the timers the batch's watermark fires, Flink and the run
  fire them first (at the advance, before the step's rows): the fraud rule's twin prunes no state (the example's
  rule prunes what the watermark left behind, which its timers no longer need only in Flink's order), and the
  distinct merchants an alert counts are those its card's rows read by then, so they are not compared;
- SS never ends its input: what its last watermark has not passed is not emitted (behind a join, its interval
  more), where the run's end of input closes every window. So only the windows SS emitted are compared, and the
  run must hold each of them, equal.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq


def released(path: Path) -> list[dict[str, Any]]:
    """The rows a run's Parquet sink released (its ``step`` partition a column)."""
    return ds.dataset(str(path), format="parquet", partitioning="hive").to_table().to_pylist()


def at_ms(value: Any) -> int:
    return int(value.timestamp() * 1000)


VIEWS = pa.schema([("user", pa.string()), ("page", pa.string()), ("ts", pa.int64())])


_SQL_TYPES = {pa.int64(): "BIGINT", pa.bool_(): "BOOLEAN", pa.string(): "STRING"}


def _stream(spark: Any, source: Path, bound_s: int, schema: pa.Schema = VIEWS, time: str = "ts") -> Any:
    """The steps' files as SS reads them: a file a micro-batch, ``ts`` its event time (a timestamp made of the
    column ``time``, ms, which another name keeps), ``bound_s`` its bound."""
    from pyspark.sql import functions as F

    ddl = ", ".join(f"{f.name} {_SQL_TYPES[f.type]}" for f in schema)
    return (spark.readStream.schema(ddl).option("maxFilesPerTrigger", 1)
            .parquet(str(source)).withColumn("ts", F.timestamp_millis(time))
            .withWatermark("ts", f"{bound_s} seconds"))


def write_steps(directory: Path, steps: list[list[dict[str, Any]]], schema: pa.Schema = VIEWS) -> Path:
    """One Parquet file a step, in step order (SS takes files oldest first: their times are set so)."""
    directory.mkdir(parents=True)
    for i, rows in enumerate(steps, start=1):
        path = directory / f"step-{i:05d}.parquet"
        pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)
        os.utime(path, (1_700_000_000 + i, 1_700_000_000 + i))
    return directory


def window_of_windows(spark: Any, source: Path, work: Path, bound_s: int) -> list[dict[str, Any]]:
    """1-minute counts per page, then 5-minute sums of them, in SS's append mode: the rows it emitted."""
    from pyspark.sql import functions as F

    views = _stream(spark, source, bound_s)
    minutes = views.groupBy(F.window("ts", "1 minute"), "page").agg(F.count(F.lit(1)).alias("views"))
    fives = minutes.groupBy(F.window(F.window_time("window"), "5 minutes"), "page").agg(
        F.sum("views").alias("views"), F.count(F.lit(1)).alias("minutes"))
    out = fives.select("page", F.col("window.start").alias("window_start"), "views", "minutes")
    return _collected(spark, out, work, "twin_fives")


def windows_of_sessions(spark: Any, source: Path, work: Path, bound_s: int, gap_s: int) -> list[dict[str, Any]]:
    """Sessions per user, then 10-minute counts of them by their end, in SS's append mode: the rows it emitted."""
    from pyspark.sql import functions as F

    views = _stream(spark, source, bound_s)
    sessions = views.groupBy(F.session_window("ts", f"{gap_s} seconds"), "user").agg(
        F.count(F.lit(1)).alias("views"))
    tens = sessions.groupBy(F.window(F.window_time("session_window"), "10 minutes"), "user").agg(
        F.count(F.lit(1)).alias("sessions"), F.sum("views").alias("views"))
    out = tens.select("user", F.col("window.start").alias("window_start"), "sessions", "views")
    return _collected(spark, out, work, "twin_tens")


def windows_joined(spark: Any, source: Path, work: Path, bound_s: int) -> list[dict[str, Any]]:
    """Views per page and minute joined with distinct users per page and minute on the page and the minute's end
    (SS: ``window_time`` on both sides, equal), in SS's append mode: the pairs it emitted."""
    from pyspark.sql import functions as F

    views = _stream(spark, source, bound_s)
    counts = views.groupBy(F.window("ts", "1 minute"), "page").agg(F.count(F.lit(1)).alias("views")).select(
        "page", F.col("window.start").alias("window_start"), F.window_time("window").alias("a_t"), "views")
    users = views.groupBy(F.window("ts", "1 minute"), "page").agg(F.approx_count_distinct("user").alias("users"))
    users = users.select(F.col("page").alias("b_page"), F.window_time("window").alias("b_t"))
    pairs = counts.join(users, F.expr("page = b_page AND b_t >= a_t AND b_t <= a_t"))
    return _collected(spark, pairs.select("page", "window_start", "views"), work, "twin_pairs")


IMPRESSIONS = pa.schema([("id", pa.string()), ("campaign", pa.string()), ("ts", pa.int64())])
CLICKS = pa.schema([("id", pa.string()), ("ts", pa.int64())])


def windows_of_a_left_join(spark: Any, impressions: Path, clicks: Path, work: Path, bound_s: int,
                           within_s: int) -> list[dict[str, Any]]:
    """Impressions left-joined with the clicks ``within_s`` after them, then per campaign and minute of the
    impression the impressions and the clicked ones, in SS's append mode: the windows it emitted. SS (3.5 on)
    holds the watermark the join passes on back by its interval, as Flink and the run do."""
    from pyspark.sql import functions as F

    left = _stream(spark, impressions, bound_s, IMPRESSIONS)
    right = _stream(spark, clicks, bound_s, CLICKS).select(F.col("id").alias("c_id"), F.col("ts").alias("c_ts"))
    joined = left.join(right, F.expr(f"id = c_id AND c_ts >= ts AND c_ts <= ts + interval {within_s} seconds"),
                       "leftOuter")
    per = joined.groupBy(F.window("ts", "1 minute"), "campaign").agg(
        F.count(F.lit(1)).alias("impressions"), F.sum(F.col("c_id").isNotNull().cast("long")).alias("clicks"))
    out = per.select("campaign", F.col("window.start").alias("window_start"), "impressions", "clicks")
    return _collected(spark, out, work, "twin_rates")


def windows_of_unique_views(spark: Any, source: Path, work: Path, bound_s: int) -> list[dict[str, Any]]:
    """A user's views of a page deduplicated (``dropDuplicatesWithinWatermark``: SS's horizon is the watermark's
    delay), then views per page and minute, in SS's append mode: the windows it emitted."""
    from pyspark.sql import functions as F

    unique = _stream(spark, source, bound_s).dropDuplicatesWithinWatermark(["user", "page"])
    minutes = unique.groupBy(F.window("ts", "1 minute"), "page").agg(F.count(F.lit(1)).alias("views"))
    return _collected(spark, minutes.select("page", F.col("window.start").alias("window_start"), "views"), work,
                      "twin_unique")


PAYMENTS = pa.schema([("payment_id", pa.string()), ("card", pa.string()), ("merchant", pa.string()),
                      ("declined", pa.bool_()), ("ts_ms", pa.int64())])


def fraud_alerts(spark: Any, source: Path, work: Path, bound_s: int) -> list[dict[str, Any]]:
    """``examples/fraud-alerts``' rule with ``transformWithStateInPandas`` (event-time timers, list state):
    three declines of a card within 5 minutes, then 10 quiet minutes, raise an alert when the watermark passes
    them. The alerts SS emitted, without their ids (drawn at random) and merchants (see above)."""
    import pandas as pd
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor

    minute = 60_000

    class Rule(StatefulProcessor):  # type: ignore[misc]  # defined here: Spark's Python workers get it by value
        def init(self, handle: Any) -> None:
            self.handle = handle
            self.paid = handle.getListState("paid", "t long")
            self.declined = handle.getListState("declined", "t long")

        def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Any:
            for part in rows:
                for ts, declined in zip(part["ts_ms"], part["declined"]):
                    self.paid.appendValue((int(ts),))
                    if declined:
                        self.declined.appendValue((int(ts),))
                        self.handle.registerTimer(int(ts) + 10 * minute)
            return iter([])

        def handleExpiredTimer(self, key: Any, timerValues: Any, expiredTimerInfo: Any) -> Any:
            at = expiredTimerInfo.getExpiryTimeInMs()
            last = at - 10 * minute
            burst = [t for (t,) in self.declined.get() if last - 5 * minute < t <= last]
            if len(burst) < 3 or any(last < t <= at for (t,) in self.paid.get()):
                return iter([])
            return iter([pd.DataFrame({"card": [key[0]], "declines": [len(burst)], "first_decline_ms": [min(burst)],
                                       "quiet_since_ms": [last]})])

        def close(self) -> None:
            pass

    alerts = _stream(spark, source, bound_s, PAYMENTS, time="ts_ms").groupBy("card").transformWithStateInPandas(
        statefulProcessor=Rule(), outputStructType="card string, declines long, first_decline_ms long, "
        "quiet_since_ms long", outputMode="Append", timeMode="EventTime")
    return _collected(spark, alerts, work, "twin_alerts", {
        "spark.sql.streaming.stateStore.providerClass":  # SS's keyed functions keep their state in RocksDB only
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"})


def views_per_minute(spark: Any, source: Path, work: Path, bound_s: int, slide_s: int | None = None,
                     single: bool = True) -> list[dict[str, Any]]:
    """``examples/page-views``' windows (views per page per minute, tumbling or sliding), in SS's append mode: the
    rows it emitted. SS has no distinct count in a stream and no order for ``first``/``last``: the views alone.
    ``single``: late rows judged as with one stateful operator (``SINGLE_OPERATOR``), else as SS 3.4+ does."""
    from pyspark.sql import functions as F

    views = _stream(spark, source, bound_s)
    window = F.window("ts", "1 minute", f"{slide_s} seconds") if slide_s else F.window("ts", "1 minute")
    minutes = views.groupBy(window, "page").agg(F.count(F.lit(1)).alias("views"))
    return _collected(spark, minutes.select("page", F.col("window.start").alias("window_start"), "views"), work,
                      "twin_minutes", SINGLE_OPERATOR if single else None)


def visits(spark: Any, source: Path, work: Path, bound_s: int, gap_s: int) -> list[dict[str, Any]]:
    """``examples/user-sessions``' sessions per user, in SS's append mode: the sessions it emitted, each with its
    bounds and its events."""
    from pyspark.sql import functions as F

    events = _stream(spark, source, bound_s)
    sessions = events.groupBy(F.session_window("ts", f"{gap_s} seconds"), "user").agg(
        F.count(F.lit(1)).alias("events"))
    out = sessions.select("user", F.col("session_window.start").alias("window_start"),
                          F.col("session_window.end").alias("window_end"), "events")
    return _collected(spark, out, work, "twin_visits", SINGLE_OPERATOR)


# SS 3.4 on judges a batch's rows against the watermark of the batch before last: the late-event watermark of a
# stateful operator is the previous batch's eviction watermark (IncrementalExecution, for chains of stateful
# operators), so a row whose window the batch before closed still counts. With one stateful operator SS can judge
# them as before 3.4 and as the run and Flink do (against the watermark the batch evicts with): the single-
# operator twins of the examples turn that off, so a row late to the run is late to SS too.
SINGLE_OPERATOR = {"spark.sql.streaming.statefulOperator.allowMultiple": "false"}


def _collected(spark: Any, out: Any, work: Path, name: str, conf: dict[str, str] | None = None
               ) -> list[dict[str, Any]]:
    saved = {k: spark.conf.get(k) for k in conf or {}}
    for k, v in (conf or {}).items():
        spark.conf.set(k, v)
    try:
        return _drained(spark, out, work, name)
    finally:
        for k, v in saved.items():
            spark.conf.set(k, v)


def _drained(spark: Any, out: Any, work: Path, name: str) -> list[dict[str, Any]]:
    query = (out.writeStream.format("memory").queryName(name).outputMode("append")
             .option("checkpointLocation", str(work / "checkpoint")).start())
    try:
        query.processAllAvailable()
        return [r.asDict() for r in spark.sql(f"SELECT * FROM {name}").collect()]
    finally:
        query.stop()
        spark.catalog.dropTempView(name)
