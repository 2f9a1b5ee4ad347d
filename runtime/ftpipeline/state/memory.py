"""The ``memory`` state backend: one Arrow table per channel, in the Spark process.

Every step rebuilds the table (a join over the whole state), so a step costs
in proportion to the state, not to the keys it touches; and a checkpoint
writes the whole table. Right for tiny state and tests, and the reference
the other backends are compared with (``bench/state_backends.py``).
Tables are immutable: a frozen reference is the checkpoint, whatever the
next step does.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc

from ftpipeline.checkpoint.storage import CheckpointStorage
from ftpipeline.checkpoint.tracker import ChannelSnapshot
from ftpipeline.state.backend import STEP, Writer

_ORDER = "__ftp_order"


class MemoryState:
    def __init__(self, schema: pa.Schema, keys: list[str], table: pa.Table | None = None,
                 index: str | None = None) -> None:
        self.schema = schema
        self.keys = keys
        self.index = index
        self.table = table if table is not None else schema.empty_table()

    def get(self, keys: pa.Table) -> pa.Table:
        probe = keys.select(self.keys).append_column(_ORDER, pa.array(range(keys.num_rows), pa.int64()))
        joined = probe.join(self.table, keys=self.keys, join_type="left outer", coalesce_keys=True)
        joined = joined.sort_by(_ORDER)
        return pa.Table.from_arrays([joined.column(f.name) for f in self.schema], schema=self.schema)

    def put(self, rows: pa.Table) -> None:
        rows = rows.select(self.schema.names).cast(self.schema)
        kept = self.table.join(rows.select(self.keys), keys=self.keys, join_type="left anti")
        self.table = pa.concat_tables([kept.select(self.schema.names).cast(self.schema), rows])

    def delete(self, keys: pa.Table) -> None:
        kept = self.table.join(keys.select(self.keys), keys=self.keys, join_type="left anti")
        self.table = kept.select(self.schema.names).cast(self.schema)

    def evict(self, before_step: int) -> int:
        expired = pc.less(self.table.column(STEP), before_step)
        count = int(pc.sum(expired).as_py() or 0)
        if count:
            self.table = self.table.filter(pc.invert(expired))
        return count

    def expire(self, before: int, since: int | None = None) -> pa.Table:
        assert self.index is not None, "expire needs a state created with an index"
        gone = pc.fill_null(pc.less(self.table.column(self.index), before), False)
        if since is not None:
            gone = pc.and_(gone, pc.fill_null(pc.greater_equal(self.table.column(self.index), since), False))
        taken = self.table.filter(gone)
        if taken.num_rows:
            self.table = self.table.filter(pc.invert(gone))
        return taken

    def scan(self) -> Iterator[pa.RecordBatch]:
        yield from self.table.to_batches()

    def count(self) -> int:
        return int(self.table.num_rows)

    def freeze(self, storage: CheckpointStorage, epoch: int, channel: str, step: int) -> Writer:
        table = self.table

        def write() -> ChannelSnapshot:
            return storage.write_state(epoch, channel, step, table)
        return write

    def close(self) -> None:
        self.table = self.schema.empty_table()


class MemoryBackend:
    name = "memory"

    def create(self, channel: str, schema: pa.Schema, keys: list[str], index: str | None = None) -> MemoryState:
        return MemoryState(schema, keys, index=index)

    def restore(self, channel: str, storage: CheckpointStorage, path: str, keys: list[str],
                step: int, index: str | None = None) -> MemoryState | None:
        if not path:
            return None
        from ftpipeline.state.snapshots import read_rows

        schema, keys, batches = read_rows(storage, path, keys, step)
        return MemoryState(schema, keys, pa.Table.from_batches(list(batches), schema=schema), index)
