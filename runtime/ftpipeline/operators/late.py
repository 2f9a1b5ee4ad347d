"""The late-data output: records behind the watermark are kept, not dropped, and counted.

As the dead-letter output (``dataflow/deadletter.py``): one Parquet file per
``(stage, step, channel)`` (named with the stage's parallelism), written whole (one object of a directory
or a bucket, ``objectstore/``), so a step replayed after a
recovery rewrites the same file with the same records and the output holds
each late record once without going through the barrier. A record is late
or not by its step's recorded watermark alone, the same in every replay.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from ftpipeline.barrier.objects import read_steps
from ftpipeline.objectstore.base import ObjectStore, open_store

LATE_REASON, LATE_WATERMARK = "late_reason", "late_watermark"  # the columns a late record gets


def late_rows(rows: pa.Table, watermark: int, reason: str) -> pa.Table:
    """``rows`` as the late-data output holds them: with why, and the watermark they missed (a timestamp)."""
    n = rows.num_rows
    return rows.append_column(LATE_REASON, pa.array([reason] * n, pa.string())).append_column(
        LATE_WATERMARK, pa.array([watermark] * n, pa.int64()).cast(pa.timestamp("us", tz="UTC")))


def late_key(stage: str, step: int, channel: int, parallelism: int) -> str:
    return f"{stage}/step={step}/part-{channel:05d}-of-{parallelism:05d}.parquet"


def write_late(store: ObjectStore, stage: str, step: int, channel: int, parallelism: int, rows: pa.Table) -> str:
    """Write one channel's late rows of a step (its key in ``store``). Which rows are late does not depend on
    the channels, but which channel finds them does: a step replayed after a rescale removes the files its
    earlier parallelism wrote (at least one channel has late rows whenever the step has any)."""
    key = late_key(stage, step, channel, parallelism)
    store.delete([k for k in store.list(f"{stage}/step={step}/")
                  if k.endswith(".parquet") and not k.endswith(f"-of-{parallelism:05d}.parquet")])
    sink = pa.BufferOutputStream()
    pq.write_table(rows, sink)
    store.put(key, sink.getvalue().to_pybytes())
    return key


def read_late(root: Path | str, stage: str) -> pa.Table | None:
    """Every late row a stage's output holds, with its ``step`` (None: none)."""
    store = open_store(root)
    found = read_steps(store, [(int(k.split("/")[1].removeprefix("step=")), k)
                               for k in store.list(f"{stage}/step=") if k.endswith(".parquet")])
    return found if found.num_rows else None
