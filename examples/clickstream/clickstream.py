"""Clickstream analytics: per-user engagement and revenue, updated every step.

A web shop's event stream (views, clicks, add-to-cart, purchases) is cleaned —
bot traffic and events without a user are dropped — and folded into a running
per-user aggregate that a dashboard can read step by step. The generator
stands in for a Kafka topic: it is deterministic, so a replayed step after a
lost worker produces exactly the same events.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

USERS = 20_000
EVENT_TYPES = np.array(["view", "click", "add_to_cart", "purchase"])
EVENT_WEIGHTS = [0.62, 0.28, 0.07, 0.03]
EPOCH_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def generate_events(ctx) -> pa.Table:  # type: ignore[no-untyped-def]
    """ctx: ftpipeline GeneratorContext (rng, step, channel, offset, rows)."""
    rng, n = ctx.rng, ctx.rows
    users = (rng.zipf(1.2, n) - 1) % USERS
    user_id = np.char.add("u", np.char.zfill(users.astype(str), 6))
    user_id[rng.random(n) < 0.005] = ""  # broken client: no user id
    event_type = rng.choice(EVENT_TYPES, n, p=EVENT_WEIGHTS)
    purchase = event_type == "purchase"
    amount = np.where(purchase, rng.integers(199, 25_000, n), 0)
    seq = np.arange(ctx.offset, ctx.offset + n, dtype=np.int64)
    return pa.table({
        "event_id": np.char.add(f"c{ctx.channel}-", seq.astype(str)),
        "user_id": user_id,
        "event_type": event_type,
        "page": rng.integers(1, 400, n),
        "amount_cents": amount.astype(np.int64),
        "is_bot": rng.random(n) < 0.02,
        "ts_ms": EPOCH_MS + seq * 7 + ctx.channel,
    })


def clean_events(df: DataFrame) -> DataFrame:
    """Drop bots and user-less events; derive per-event flags (row-wise, keeps other columns)."""
    return (
        df.filter((F.col("user_id") != "") & ~F.col("is_bot"))
        .withColumn("is_click", (F.col("event_type") == "click").cast("long"))
        .withColumn("is_purchase", (F.col("event_type") == "purchase").cast("long"))
        .withColumn("revenue_cents", F.when(F.col("event_type") == "purchase", F.col("amount_cents")).otherwise(0))
    )
