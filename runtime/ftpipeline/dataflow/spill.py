"""A large task's rows through files: Spark reads its input and writes its result, nothing is collected.

Why: a chain's program hands its result back to the worker's process as
one Arrow table (``toArrow``). Spark collects every partition of it into
its driver first, which caps a step's output at ``spark.driver.maxResultSize``
(1 GiB by default) and at the driver's heap; Python then holds it again to
split it per downstream channel. For the steps most pipelines run (a few
MB) that is the fast path: one job, no output commit. A step larger than
the driver's memory fails on it.

How: a task whose input is larger than ``spark.maxInMemoryBytes`` (64 MiB
unless set; 0 sends every task this way) takes this path instead:

- its rows reach Spark as a Parquet file of the plan's scan directory
  (``plans.py``), as every task's do: written a row group at a time from
  the memory-mapped input objects, never built in memory;
- Spark runs the program and writes the result as Parquet itself, with
  shuffle partitions scaled to the input (``partitions``: one per 64 MiB,
  at least one per core) and adaptive execution on, which coalesces them
  where the data turns out smaller;
- the process reads the result a batch of ``BATCH_ROWS`` at a time and
  hands each batch on: split per downstream channel into objects of their
  own files (``ObjectBuffer.put_streamed``), or appended to a chained
  sink's part (``ParquetBundleSink.stage_batches``).

So a step costs the process and Spark's driver a batch of memory, not the
step. The result's Arrow schema is the one ``toArrow`` gives for the same
DataFrame, and every batch is cast to it, so which path ran never shows in
an object.

States of a task's result::

    input <= limit:  collected (toArrow) -> split -> bundle
    input >  limit:  written (Spark) -> streamed (BATCH_ROWS at a time) -> objects / sink part -> removed
"""

from __future__ import annotations

import math
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

PARTITION_BYTES = 64 * 1024 * 1024  # Spark's own advisory size of an adaptive shuffle partition
MAX_PARTITIONS = 2000               # the point past which Spark compresses its map statuses
BATCH_ROWS = 65_536


def through_files(table: pa.Table, limit: int) -> bool:
    """Whether a task of this input takes the file path (``limit`` 0: every task does)."""
    return limit == 0 or table.nbytes > limit


def partitions(nbytes: int, cores: int) -> int:
    """Shuffle partitions for a step of ``nbytes``: one per ``PARTITION_BYTES``, a multiple of the cores."""
    cores = max(1, cores)
    wanted = max(1, math.ceil(nbytes / PARTITION_BYTES))
    return min(MAX_PARTITIONS, math.ceil(wanted / cores) * cores)


@contextmanager
def scaled(spark: Any, nbytes: int) -> Iterator[int]:
    """The session set for a step of ``nbytes`` (shuffle partitions, adaptive execution on, timestamps
    written as Parquet's microseconds, not INT96), its settings restored after.

    A reused plan takes them: each task plans its analysed plan afresh
    (``plans.py``), and the planner reads these settings then."""
    n = partitions(nbytes, spark.sparkContext.defaultParallelism)
    settings = {"spark.sql.shuffle.partitions": str(n), "spark.sql.adaptive.enabled": "true",
                "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS"}
    before = {key: spark.conf.get(key) for key in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        yield n
    finally:
        for key, value in before.items():
            spark.conf.set(key, value)


@dataclass(frozen=True)
class Written:
    """A program's result as Spark wrote it: Parquet files in ``directory``, read back as ``schema``."""

    directory: Path
    schema: pa.Schema

    def batches(self) -> Iterator[pa.Table]:
        """The rows, ``BATCH_ROWS`` at a time, in the order of Spark's partitions; at least one (maybe empty)."""
        empty = True
        for path in sorted(self.directory.glob("part-*.parquet")):
            for batch in pq.ParquetFile(path).iter_batches(batch_size=BATCH_ROWS):
                empty = False
                yield pa.Table.from_batches([batch]).select(self.schema.names).cast(self.schema)
        if empty:
            yield self.schema.empty_table()

    def remove(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)


def write(df: Any, directory: Path) -> Written:
    """Have Spark write ``df`` as Parquet into ``directory`` (replacing it); its rows stay out of the driver."""
    from pyspark.sql.pandas.types import to_arrow_schema

    spark = df.sparkSession
    large = str(spark.conf.get("spark.sql.execution.arrow.useLargeVarTypes")).lower() == "true"
    schema = to_arrow_schema(df.schema, error_on_duplicated_field_names_in_struct=True, timezone="UTC",
                             prefers_large_types=large)  # what toArrow would have returned
    shutil.rmtree(directory, ignore_errors=True)
    directory.parent.mkdir(parents=True, exist_ok=True)
    df.write.option("compression", "none").parquet(str(directory))
    return Written(directory, schema)
