"""Click-through rate per campaign and minute: impressions joined with the clicks that follow them within 10
minutes (a left join: every impression once, with its click or without), counted per campaign in one-minute
windows of the impression's time, the rate derived from the counts."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F


def mark_clicks(df: DataFrame) -> DataFrame:
    """1 for an impression's row with a click, 0 for one without (row-wise, keeps other columns)."""
    return df.withColumn("clicked", F.col("click_id").isNotNull().cast("long"))


def rate(df: DataFrame) -> DataFrame:
    """The rate of each window's row (row-wise)."""
    return df.withColumn("ctr", F.col("clicks") / F.col("impressions"))
