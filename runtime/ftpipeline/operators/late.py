"""The late-data output: records behind the watermark are kept, not dropped, and counted.

As the dead-letter output (``dataflow/deadletter.py``): one Parquet file per
``(stage, step, channel)`` (named with the stage's parallelism), written atomically, so a step replayed after a
recovery rewrites the same file with the same records and the output holds
each late record once without going through the barrier. A record is late
or not by its step's recorded watermark alone, the same in every replay.
"""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

LATE_REASON, LATE_WATERMARK = "late_reason", "late_watermark"  # the columns a late record gets


def late_rows(rows: pa.Table, watermark: int, reason: str) -> pa.Table:
    """``rows`` as the late-data output holds them: with why, and the watermark they missed (a timestamp)."""
    n = rows.num_rows
    return rows.append_column(LATE_REASON, pa.array([reason] * n, pa.string())).append_column(
        LATE_WATERMARK, pa.array([watermark] * n, pa.int64()).cast(pa.timestamp("us", tz="UTC")))


def late_file(root: Path, stage: str, step: int, channel: int, parallelism: int) -> Path:
    return root / stage / f"step={step}" / f"part-{channel:05d}-of-{parallelism:05d}.parquet"


def write_late(root: Path, stage: str, step: int, channel: int, parallelism: int, rows: pa.Table) -> Path:
    """Write one channel's late rows of a step. Which rows are late does not depend on the channels, but
    which channel finds them does: a step replayed after a rescale removes the files its earlier
    parallelism wrote (at least one channel has late rows whenever the step has any)."""
    path = late_file(root, stage, step, channel, parallelism)
    path.parent.mkdir(parents=True, exist_ok=True)
    for other in path.parent.glob("part-*.parquet"):
        if not other.name.endswith(f"-of-{parallelism:05d}.parquet"):
            other.unlink(missing_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    pq.write_table(rows, tmp)
    os.replace(tmp, path)
    return path
