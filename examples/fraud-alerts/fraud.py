"""Fraud alerts as a keyed function: three declined payments of a card within 5 minutes of event time, then
no payment of that card for 10 minutes, raise one alert (a burst of declines followed by silence: a card
being tested, then abandoned).

Per card it keeps the times of its recent payments and declines (lists, pruned as the watermark moves on)
and the merchants seen (a map whose entries expire an hour of processing time after their last write), and
sets an event-time timer 10 minutes after each decline. When the watermark passes it, every payment up to
then has arrived, whatever order the topic's partitions delivered them in: the timer raises the alert if the
decline ended a burst of three within 5 minutes and no payment followed within 10. ``ctx.rng`` draws each
alert's id, so a replay after a lost worker gives the same ids. Every time here is milliseconds since the
epoch: the rows' ``ts_ms``, ``ctx.watermark``, ``ctx.now`` and the timers alike.
"""

from __future__ import annotations

from typing import Any

MINUTE = 60_000  # ms


class FraudRule:
    def process(self, key: tuple[Any, ...], rows: Any, ctx: Any) -> None:
        paid, declined, merchants = ctx.list("paid"), ctx.list("declined"), ctx.map("merchants", ttl="1h")
        horizon = (ctx.watermark or 0) - 20 * MINUTE  # older payments can no longer decide an alert
        paid.update([t for t in paid.get() if t >= horizon])
        declined.update([t for t in declined.get() if t >= horizon])
        for row in rows.to_pylist():  # in no particular order: what follows depends on event time alone
            ts = row["ts_ms"]
            paid.append(ts)
            merchants.put(row["merchant"], merchants.get(row["merchant"], 0) + 1)
            if row["declined"]:
                declined.append(ts)
                ctx.timers.register_event_time(ts + 10 * MINUTE)  # decided once the watermark is past it

    def on_timer(self, key: tuple[Any, ...], timer: Any, ctx: Any) -> list[dict[str, Any]]:
        last = timer.time - 10 * MINUTE  # a decline; the watermark shows every payment up to timer.time
        burst = [t for t in ctx.list("declined").get() if last - 5 * MINUTE < t <= last]
        if len(burst) < 3 or any(last < t <= timer.time for t in ctx.list("paid").get()):
            return []  # not three declines in 5 minutes, or not quiet for 10 after the last
        return [{"alert_id": f"a{ctx.rng.randrange(16**8):08x}", "card": key[0], "declines": len(burst),
                 "first_decline_ms": min(burst), "quiet_since_ms": last,
                 "merchants": len(ctx.map("merchants").keys())}]
