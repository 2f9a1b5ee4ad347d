"""The entry point of the chained event-time tests (``test_chains.py``): row-wise functions between operators."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F


def minutes(df: DataFrame) -> DataFrame:
    """A minute's counts as rows of their minute (its start): a second window counts them again."""
    return df.withColumnRenamed("window_start", "minute").drop("window_end")


def session_ends(df: DataFrame) -> DataFrame:
    """A closed session as a row at its end (its last view plus the gap: when it closed, as Flink stamps a
    window's output with its end), for windows of sessions."""
    return df.withColumnRenamed("window_end", "ended").drop("window_start")


def clicked(df: DataFrame) -> DataFrame:
    """1 for an impression joined with its click, 0 for one the left join released alone (row-wise)."""
    return df.withColumn("clicked", F.col("right_ts").isNotNull().cast("long"))


MINUTE_MS = 60_000  # the keyed-function API's unit, as a long event-time column's


class MinuteMarks:
    """A keyed function whose output only its timers make: one row per page and minute it was viewed in, when
    the watermark passes the minute's end (an event-time timer there; ms)."""

    def process(self, key: tuple[object, ...], rows: object, ctx: object) -> None:
        for ts in rows.column("ts").to_pylist():  # type: ignore[attr-defined]
            ctx.timers.register_event_time((ts // MINUTE_MS + 1) * MINUTE_MS)  # type: ignore[attr-defined]

    def on_timer(self, key: tuple[object, ...], timer: object, ctx: object) -> list[dict[str, object]]:
        return [{"page": key[0], "minute": timer.time - MINUTE_MS}]  # type: ignore[attr-defined]


class LoginAlerts:
    """Three failed logins of a user within 5 minutes, then 10 minutes without a login of theirs: an alert. The
    failures' times in a list, the pending alert in a value and an event-time timer for it (ms). A login read
    while the alert is pending but after its time (the watermark had not reached it yet) lets it stand: the rule
    depends on event time alone, not on when the watermark passes."""

    def process(self, key: tuple[object, ...], rows: object, ctx: object) -> list[dict[str, object]]:
        failed, pending = ctx.list("failed"), ctx.value("pending")  # type: ignore[attr-defined]
        out = []
        for row in sorted(rows.to_pylist(), key=lambda r: (r["ts"], r["ok"])):  # type: ignore[attr-defined]
            ts = row["ts"]
            if pending.exists():
                ctx.timers.delete_event_time(pending.get())  # type: ignore[attr-defined]
                if ts > pending.get():  # the quiet period had passed in event time: the alert stands
                    out.append({"user": key[0], "at": pending.get()})
                    failed.clear()
                pending.clear()  # else a login within the quiet period: the alert waits again
            if not row["ok"]:
                recent = [t for t in failed.get() if t > ts - 5 * MINUTE_MS] + [ts]
                failed.update(recent)
                if len(recent) >= 3:
                    pending.update(ts + 10 * MINUTE_MS)
                    ctx.timers.register_event_time(ts + 10 * MINUTE_MS)  # type: ignore[attr-defined]
        return out

    def on_timer(self, key: tuple[object, ...], timer: object, ctx: object) -> list[dict[str, object]]:
        ctx.value("pending").clear()  # type: ignore[attr-defined]
        ctx.list("failed").clear()  # type: ignore[attr-defined]
        return [{"user": key[0], "at": timer.time}]  # type: ignore[attr-defined]
