"""Clickstream from Kafka: per-user engagement and revenue, written back to Kafka exactly once.

The shop's events arrive on the topic ``clicks`` as JSON; bots and events
without a user are dropped, and a running per-user aggregate is written to
the topic ``user-totals`` keyed by user, one record per user touched in a
step with the user's totals so far (update mode). A consumer reading with
``isolation.level=read_committed`` sees each step's records once, however
many workers are lost on the way.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F


def clean_events(df: DataFrame) -> DataFrame:
    """Drop bots and user-less events; derive per-event flags (row-wise, keeps other columns)."""
    return (
        df.filter(F.col("user_id").isNotNull() & (F.col("user_id") != "") & ~F.coalesce(F.col("is_bot"), F.lit(False)))
        .withColumn("is_click", (F.col("event_type") == "click").cast("long"))
        .withColumn("is_purchase", (F.col("event_type") == "purchase").cast("long"))
        .withColumn("revenue_cents", F.when(F.col("event_type") == "purchase", F.col("amount_cents")).otherwise(0))
    )
