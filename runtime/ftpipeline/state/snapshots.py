"""Reading any state snapshot as rows, whichever backend wrote it.

A pipeline may change ``state.backend`` between runs, and a rebuild may run
on a worker whose backend differs from the snapshot's writer's only in a
test; both need the rows of a snapshot without caring how they were stored:
a Parquet file (``memory``) or a RocksDB checkpoint directory (``rocksdb``,
opened read-only from a temporary copy).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa

from ftpipeline.checkpoint.storage import CheckpointStorage
from ftpipeline.state.backend import STEP


def read_rows(storage: CheckpointStorage, path: str, keys: list[str],
              step: int) -> tuple[pa.Schema, list[str], Iterator[pa.RecordBatch]]:
    """(schema, key columns, rows) of the snapshot at ``path`` (its key in the storage)."""
    if path.endswith(".parquet"):
        table = storage.read_table(path)
        if STEP not in table.schema.names:  # written before rows carried their step
            table = table.append_column(STEP, pa.array([step] * table.num_rows, pa.int64()))
        return table.schema, keys, iter(table.to_batches())
    from ftpipeline.state.rocks import RocksBackend

    scratch = Path(tempfile.mkdtemp(prefix="ftpipeline-state-"))
    state = RocksBackend(scratch).restore(path.rpartition("/")[2], storage, path, keys, step)
    assert state is not None

    def rows() -> Iterator[pa.RecordBatch]:
        try:
            yield from state.scan()
        finally:
            state.close()
            shutil.rmtree(scratch, ignore_errors=True)
    return state.schema, state.keys, rows()

