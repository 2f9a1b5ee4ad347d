"""A fraud rule as a keyed function (the entry point of ``test_process.py``): three declined payments of a card
within 5 minutes of event time, then no payment of it for 10 minutes, raise an alert. It keeps a list of the
declined payments' times, the pending alert's time in a value, the merchants seen in a map with a TTL of
processing time, a processing-time timer that reports a card's first payment once a second of wall time has
passed, and an event-time timer for the alert; a draw from ctx.rng makes each alert's id. Declines from
before the run (``process.initialState``) count toward a card's next burst."""

from __future__ import annotations

from typing import Any

MINUTE = 60_000  # ms: the API's unit, as the rows' ts


class FraudRule:
    def process(self, key: tuple[Any, ...], rows: Any, ctx: Any) -> list[dict[str, Any]]:
        declined, pending = ctx.list("declined"), ctx.value("pending")
        merchants, first = ctx.map("merchants", ttl="2s"), ctx.value("first")
        if not first.exists():
            first.update(min(rows.column("ts").to_pylist()))
            ctx.timers.register_processing_time(ctx.now + 1_000)
        # a step's rows of a key come in no particular order: sorted, the rule does not depend on it
        for row in sorted(rows.to_pylist(), key=lambda r: (r["ts"], r["merchant"], r["declined"])):
            ts = row["ts"]
            merchants.put(row["merchant"], merchants.get(row["merchant"], 0) + 1)
            if pending.exists():  # a payment within the quiet period: the alert waits again
                ctx.timers.delete_event_time(pending.get())
                pending.clear()
            if row["declined"]:
                recent = [t for t in declined.get() if t > ts - 5 * MINUTE] + [ts]
                declined.update(recent)
                if len(recent) >= 3:
                    pending.update(ts + 10 * MINUTE)
                    ctx.timers.register_event_time(ts + 10 * MINUTE)
        return []

    def init_state(self, key: tuple[Any, ...], rows: Any, ctx: Any) -> None:
        times = sorted(rows.column("ts").to_pylist())
        ctx.list("declined").update(times)
        if len(times) >= 3:  # a burst already: its alert is due 10 quiet minutes later
            ctx.value("pending").update(times[-1] + 10 * MINUTE)
            ctx.timers.register_event_time(times[-1] + 10 * MINUTE)

    def on_timer(self, key: tuple[Any, ...], timer: Any, ctx: Any) -> list[dict[str, Any]]:
        if timer.kind == "processing":
            return [{"card": key[0], "kind": "first-seen", "at": ctx.value("first").get(), "merchants": 0,
                     "id": ctx.rng.randrange(10**9)}]
        ctx.value("pending").clear()
        ctx.list("declined").clear()
        return [{"card": key[0], "kind": "alert", "at": timer.time, "merchants": len(ctx.map("merchants").keys()),
                 "id": ctx.rng.randrange(10**9)}]
