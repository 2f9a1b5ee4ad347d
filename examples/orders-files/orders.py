"""Paid orders per country: the functions the stages of pipeline.yaml name.

``paid_orders`` is a transform (DataFrame -> DataFrame): it keeps paid
orders and derives each one's value. The per-country totals are the
pipeline's aggregate stage; no function is needed for them.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F


def paid_orders(df: DataFrame) -> DataFrame:
    return (df.filter(F.col("status") == "paid")
            .withColumn("value_cents", F.col("quantity") * F.col("unit_cents")))
