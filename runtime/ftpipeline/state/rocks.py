"""The ``rocksdb`` state backend: one embedded RocksDB per stateful channel, on the worker's disk.

A step reads the rows of the keys it touches with one multi-get and writes
them back with one write batch (``state.codec`` turns Arrow columns into
keys and values a batch at a time), so its cost follows the touched keys,
not the state; RocksDB keeps what does not fit in its block cache on disk.
This is the backend Flink and Spark Structured Streaming use for large
state. The write-ahead log is off: a state is made durable by checkpoints,
and what happened since the newest one is replayed from lineage.

Incremental checkpoints, as Flink's RocksDB backend takes them. RocksDB's
table files (``*.sst``) never change once written. At a checkpoint
``freeze`` asks RocksDB for a checkpoint directory (the memtable flushed,
the live table files hard-linked: milliseconds, on the task path); the
writer then copies to checkpoint storage only the table files no earlier
checkpoint uploaded, under ``shared/<channel>/<instance>-<file>``, and
``epoch-<e>/state/<channel>.rocks/files.json``, naming every table file the
checkpoint needs and holding the small per-checkpoint files (``MANIFEST``,
``CURRENT``, ``OPTIONS``: one request in a bucket, not one each; a larger
one, such as a log of unflushed writes, goes beside it). So a checkpoint writes what the steps since
the previous one wrote (flushes, and the compactions they caused), not the
state. A restore links (or copies) those files into a fresh directory and
opens it; its table files keep their shared names, so the next checkpoint
does not upload them again. Retention (``CheckpointStorage.prune``) deletes
a shared file once no kept checkpoint names it.

Table files are LZ4-compressed, as Spark Structured Streaming's RocksDB
store has them: with 10M keys a step's merge took 171 ms with LZ4 and 182 ms
without (``bench/state_backends.py``, candidates ``rocksdb`` and
``rocksdb-none``), and the disk and checkpoint bytes are smaller.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ftpipeline.checkpoint.storage import SHARED_LISTING as FILES, CheckpointStorage
from ftpipeline.checkpoint.tracker import ChannelSnapshot
from ftpipeline.state.backend import STEP, Writer
from ftpipeline.state.codec import RowCodec

BLOCK_CACHE_BYTES = 256 << 20   # one cache for every channel of the process
WRITE_BUFFER_BYTES = 32 << 20   # per channel; a checkpoint flushes it
SCAN_BATCH = 65536
INLINE_BYTES = 256 << 10  # a checkpoint's own file up to this size is held in its files.json
# RocksDB's own files that grow with a run, not with its state, left to themselves: its info log (kept
# 1000 files deep by default) and its MANIFEST (a record per flush and compaction, rolled at 1 GiB; a
# checkpoint holds a copy of it inline). Capped, a week-long run's pod disk and checkpoints stay flat.
INFO_LOG_BYTES, INFO_LOGS_KEPT = 1 << 20, 2
MANIFEST_BYTES = 64 << 10
BY_STEP = "by_step"  # with a TTL: a column family of (step, key), so eviction walks only the expired
BY_TIME = "by_time"  # indexed by another column (a window's firing time): (value, key), signed
_SIGN = np.uint64(1 << 63)


def _options(cache: Any) -> Any:
    from rocksdict import BlockBasedOptions, DBCompressionType, Options

    table = BlockBasedOptions()
    table.set_block_cache(cache)
    table.set_bloom_filter(10, False)
    table.set_cache_index_and_filter_blocks(True)
    options = Options(raw_mode=True)
    options.create_if_missing(True)
    options.create_missing_column_families(True)
    options.set_block_based_table_factory(table)
    options.set_compression_type(DBCompressionType.lz4())
    options.set_write_buffer_size(WRITE_BUFFER_BYTES)
    options.set_optimize_filters_for_hits(True)
    options.set_max_log_file_size(INFO_LOG_BYTES)
    options.set_keep_log_file_num(INFO_LOGS_KEPT)
    options.set_max_manifest_file_size(MANIFEST_BYTES)
    return options


def _schema_text(schema: pa.Schema) -> str:
    return base64.b64encode(schema.serialize().to_pybytes()).decode()


def _schema_of(text: str) -> pa.Schema:
    return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(text)))


class RocksState:
    def __init__(self, directory: Path, schema: pa.Schema, keys: list[str], options: Any,
                 origin: dict[str, str] | None = None, index: str | None = None) -> None:
        from rocksdict import Rdict, WriteOptions

        self.directory = directory
        self.schema = schema
        self.keys = keys
        self.rows = RowCodec(schema)
        self.key_codec = RowCodec(pa.schema([schema.field(k) for k in keys]))
        self.instance = uuid.uuid4().hex[:12]  # table file numbers restart in every instance
        self.origin = dict(origin or {})        # table file -> its shared path, once uploaded
        self.index = index
        family = BY_STEP if index == STEP else BY_TIME
        self.db = Rdict(str(directory), options, column_families={family: options} if index else None)
        self.by_step = self.db.get_column_family(family) if index else None
        self.by_step_handle = self.db.get_column_family_handle(family) if index else None
        quiet = WriteOptions()
        quiet.disable_wal = True  # type: ignore[assignment,method-assign]  # a property; the stub says method
        self.db.set_write_options(quiet)
        self._ckpt = 0

    def _key_bytes(self, keys: pa.Table) -> list[bytes]:
        return self.key_codec.encode(keys.select(self.keys).cast(self.key_codec.schema))

    def get(self, keys: pa.Table) -> pa.Table:
        wanted: list[Any] = self._key_bytes(keys)
        found = cast(list[bytes | None], self.db.get(wanted)) if wanted else []  # one multi-get
        present = [v for v in found if v is not None]
        table = self.rows.decode(present)
        if len(present) == len(found):
            return table
        at, index = 0, list[int | None]()
        for v in found:
            if v is None:
                index.append(None)
            else:
                index.append(at)
                at += 1
        return table.take(pa.array(index, pa.int64()))

    def put(self, rows: pa.Table) -> None:
        from rocksdict import WriteBatch

        rows = rows.select(self.schema.names).cast(self.schema)
        batch = WriteBatch(raw_mode=True)
        keys = self._key_bytes(rows)
        for key, value in zip(keys, self.rows.encode(rows)):
            batch.put(key, value)
        if self.index:  # (value, key) entries; one left by an earlier update is dropped when it expires
            values = self._order(rows.column(self.index).to_numpy(zero_copy_only=False))
            for i, key in enumerate(keys):
                batch.put(values[i * 8:(i + 1) * 8] + key, b"", self.by_step_handle)
        self.db.write(batch)

    def _order(self, values: np.ndarray) -> bytes:
        """Index bytes that sort as the values do: steps (never negative) as they are, anything else with
        its sign bit flipped."""
        if self.index == STEP:
            return bytes(values.astype(">u8").tobytes())
        return bytes((values.astype(np.int64).view(np.uint64) ^ _SIGN).astype(">u8").tobytes())

    def delete(self, keys: pa.Table) -> None:
        from rocksdict import WriteBatch

        batch = WriteBatch(raw_mode=True)
        for key in self._key_bytes(keys):
            batch.delete(key)
        self.db.write(batch)

    def evict(self, before_step: int) -> int:
        """Without the step index, a scan of the whole state; with it (a state with a TTL), a walk
        over the index entries older than ``before_step`` only: what changed, not what is held."""
        from rocksdict import WriteBatch

        if self.index != STEP:
            evicted = 0
            for batch in self.scan():
                table = pa.Table.from_batches([batch])
                expired = table.filter(pc.less(table.column(STEP), before_step))
                if expired.num_rows:
                    self.delete(expired)
                    evicted += expired.num_rows
            return evicted
        return int(self.expire(max(before_step, 0)).num_rows)

    def expire(self, before: int, since: int | None = None) -> pa.Table:
        """A walk over the index entries below ``before`` (from ``since``): each names a key whose row is taken
        if its index column is still in the range (not updated to another value since)."""
        from rocksdict import WriteBatch

        assert self.by_step is not None, "expire needs a state created with an index"
        bound = self._order(np.array([before], np.int64))
        low = self._order(np.array([since], np.int64)) if since is not None else None
        candidates: dict[bytes, None] = {}
        for raw in self.by_step.keys(from_key=low) if low is not None else self.by_step.keys():
            entry = cast(bytes, raw)
            if entry[:8] >= bound:
                break
            candidates[entry[8:]] = None
        if not candidates:
            return self.schema.empty_table()
        keys: list[Any] = list(candidates)
        found = cast(list[bytes | None], self.db.get(keys))
        present = [(k, v) for k, v in zip(keys, found) if v is not None]
        rows = self.rows.decode([v for _, v in present])
        taken = pc.fill_null(pc.less(rows.column(self.index), before), False) if present else None
        if taken is not None and since is not None:
            taken = pc.and_(taken, pc.fill_null(pc.greater_equal(rows.column(self.index), since), False))
        batch = WriteBatch(raw_mode=True)
        for (key, _), gone in zip(present, taken.to_pylist() if taken is not None else []):
            if gone:
                batch.delete(key)
        start = low if low is not None else (self._order(np.array([np.iinfo(np.int64).min], np.int64))
                                             if self.index != STEP else bytes(8))
        batch.delete_range(start, bound, self.by_step_handle)
        self.db.write(batch)
        return rows.filter(taken) if taken is not None else self.schema.empty_table()

    def scan(self) -> Iterator[pa.RecordBatch]:
        chunk: list[bytes] = []
        for value in self.db.values():
            chunk.append(value)
            if len(chunk) >= SCAN_BATCH:
                yield from self.rows.decode(chunk).to_batches()
                chunk = []
        if chunk:
            yield from self.rows.decode(chunk).to_batches()

    def count(self) -> int:
        return int(self.db.property_int_value("rocksdb.estimate-num-keys") or 0)

    def freeze(self, storage: CheckpointStorage, epoch: int, channel: str, step: int) -> Writer:
        from rocksdict import Checkpoint

        self._ckpt += 1
        local = self.directory.with_name(f"{self.directory.name}.ckpt-{epoch}-{self._ckpt}")
        shutil.rmtree(local, ignore_errors=True)
        Checkpoint(self.db).create_checkpoint(str(local))
        rows = self.count()

        def write() -> ChannelSnapshot:
            try:
                return self._upload(local, storage, epoch, channel, step, rows)
            finally:
                shutil.rmtree(local, ignore_errors=True)
        return write

    def _upload(self, local: Path, storage: CheckpointStorage, epoch: int, channel: str, step: int,
                rows: int) -> ChannelSnapshot:
        target = storage.rocks_key(epoch, channel)
        store = storage.store
        files: dict[str, str] = {}
        own = uploaded = 0
        inline: dict[str, str] = {}
        for entry in sorted(local.iterdir()):
            if entry.suffix != ".sst":
                size = entry.stat().st_size
                if size <= INLINE_BYTES:
                    inline[entry.name] = base64.b64encode(entry.read_bytes()).decode()
                else:
                    store.upload(f"{target}/{entry.name}", entry)
                    own += size
                continue
            shared = self.origin.get(entry.name) or f"shared/{channel}/{self.instance}-{entry.name}"
            if store.size(shared) is None:
                store.upload(shared, entry)
                uploaded += entry.stat().st_size
            files[entry.name] = shared
        self.origin.update(files)
        doc = json.dumps({"schema": _schema_text(self.schema), "keys": self.keys, "files": files,
                          "shared_bytes": uploaded, "inline": inline}).encode()
        store.put(f"{target}/{FILES}", doc)  # last: a listing names only files already up
        return storage.record_snapshot(epoch, ChannelSnapshot(channel, step, target, rows, own + len(doc) + uploaded))

    def close(self) -> None:
        self.by_step = self.by_step_handle = None  # a column family view left open delays the next open
        try:
            self.db.close()
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)


class RocksBackend:
    name = "rocksdb"

    def __init__(self, root: Path) -> None:
        from rocksdict import Cache

        self.root = root
        self.options = _options(Cache(BLOCK_CACHE_BYTES))

    def _directory(self, channel: str) -> Path:
        self.root.mkdir(parents=True, exist_ok=True)
        return self.root / f"{channel}-{uuid.uuid4().hex[:8]}"

    def create(self, channel: str, schema: pa.Schema, keys: list[str], index: str | None = None) -> RocksState:
        return RocksState(self._directory(channel), schema, keys, self.options, index=index)

    def restore(self, channel: str, storage: CheckpointStorage, path: str, keys: list[str],
                step: int, index: str | None = None) -> RocksState | None:
        if not path:
            return None
        directory = self._directory(channel)
        if path.endswith(".parquet"):  # a snapshot of the memory backend
            from ftpipeline.state.snapshots import read_rows

            schema, keys, batches = read_rows(storage, path, keys, step)
            state = RocksState(directory, schema, keys, self.options, index=index)
            for batch in batches:
                state.put(pa.Table.from_batches([batch]))
            return state
        store = storage.store
        doc = json.loads(store.get(f"{path}/{FILES}"))
        directory.mkdir(parents=True)
        for name, content in doc.get("inline", {}).items():
            (directory / name).write_bytes(base64.b64decode(content))
        for key in store.list(f"{path}/"):
            name = key.rpartition("/")[2]
            if name != FILES:
                store.download(key, directory / name)
        for name, shared in doc["files"].items():
            local = store.local_path(shared)
            try:
                if local is None:
                    raise OSError("not a local file")
                os.link(local, directory / name)  # read only, by RocksDB too
            except OSError:  # a bucket, or another filesystem (a mounted volume): copy
                store.download(shared, directory / name)
        return RocksState(directory, _schema_of(doc["schema"]), list(doc["keys"]), self.options, doc["files"],
                          index=index)

