"""Comparing outputs too large to collect: both sides cut into buckets by their exact columns.

Why: the oracle compared a sink by bringing both sides into this process
as Arrow tables (``toArrow``). A run over a 10M-key state releases tens of
millions of changelog rows: past Spark's ``maxResultSize`` and the driver's
heap, and this process's memory.

How: ``compare_tables`` only ever pairs rows whose exact (non-float)
columns are equal, so rows hashed by those columns into K buckets compare
bucket by bucket with the same function, and the counts add up. Spark
writes both sides partitioned by bucket (its rows never pass through the
driver); this process then reads one bucket of each side at a time. K is
the output's rows over ``BUCKET_ROWS``; an output of one bucket, or one with
no exact column, is compared whole, as before.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds

from ftpipeline.oracle.compare import Comparison, compare_tables

BUCKET_ROWS = 2_000_000
_BUCKET = "ftpipeline_oracle_bucket"  # no leading "_": a reader skips such directories


def buckets(rows: int) -> int:
    return max(1, math.ceil(rows / BUCKET_ROWS))


def compare_frames(name: str, expected: Any, actual: Any, rows: int, work: Path | None) -> Comparison:
    """``actual`` against ``expected`` (DataFrames of the same columns), ``rows`` about how many each holds."""
    from pyspark.sql import functions as F

    floats = {f.name for f in expected.schema.fields if f.dataType.typeName() in ("double", "float")}
    exact = [c for c in expected.columns if c not in floats]
    k = buckets(rows)
    if k == 1 or not exact or work is None:
        return compare_tables(name, expected.toArrow(), actual.toArrow())
    sides = {}
    for side, frame in (("expected", expected), ("actual", actual)):
        directory = work / f"{name}-{side}"
        frame.withColumn(_BUCKET, F.pmod(F.hash(*exact), F.lit(k))).write.partitionBy(_BUCKET).parquet(str(directory))
        sides[side] = ds.dataset(directory, format="parquet", partitioning="hive")
    total = Comparison(name, 0, 0, 0, 0, 0)
    for b in range(k):
        want, got = (_bucket(sides[s], b, expected.columns) for s in ("expected", "actual"))
        part = compare_tables(name, want, got)
        total = Comparison(name, total.expected_rows + part.expected_rows, total.actual_rows + part.actual_rows,
                           total.missing + part.missing, total.extra + part.extra,
                           total.duplicates + part.duplicates)
    return total


def _bucket(dataset: ds.Dataset, b: int, columns: list[str]) -> pa.Table:
    return dataset.to_table(columns=columns, filter=ds.field(_BUCKET) == b)
