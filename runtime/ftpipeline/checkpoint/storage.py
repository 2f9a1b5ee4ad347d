"""Checkpoint storage: snapshot files, in-flight messages and manifests in an object store.

Layout under ``<root>/<pipeline>/epoch-<e>/`` (``root``: a local directory, a
volume the worker pods share, or an ``s3://bucket/prefix``; ``objectstore/``)::

    state/<stage>.<channel>.parquet   a stateful channel's state (``memory`` backend)
    state/<stage>.<channel>.rocks/    or its RocksDB checkpoint (``rocksdb``): files.json naming its
                                      table files under shared/ and holding its small files
                                      (a larger one beside it)
    state/<stage>.<channel>.json      which step it reflects, rows, bytes
    inflight/<object>.arrow           older-epoch messages received after a checkpoint
    manifest.json                     the cut; written only after ZooKeeper committed it

and under ``<root>/<pipeline>/shared/<stage>.<channel>/`` the RocksDB table
files, each uploaded once and named by every checkpoint that needs it
(``state/rocks.py``); ``prune`` deletes one when no kept checkpoint does.

Every file is one object, written whole (no rename is needed: an object
store's put replaces an object atomically, a directory's is a write to a
temporary name and a rename). A checkpoint is committed in ZooKeeper
(``pointer.py``), not here; the manifest follows the commit. The storage
also serves as the "node" that holds in-flight objects during a restore
(the lineage tables point at it as :data:`STORAGE_NODE`).
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ftpipeline.checkpoint.tracker import ChannelSnapshot
from ftpipeline.lineage.naming import STORAGE_NODE
from ftpipeline.objectstore.base import ObjectStore, join, open_store
from ftpipeline.objectstore.config import S3Config

__all__ = ["STORAGE_NODE", "CheckpointStorage"]
SHARED_LISTING = "files.json"  # in a RocksDB snapshot's directory: the shared files it needs
_EPOCH = re.compile(r"^epoch-(\d+)$")


class CheckpointStorage:
    def __init__(self, root: Path | str, pipeline: str, config: S3Config | None = None) -> None:
        self.location = join(root, pipeline)
        self.store: ObjectStore = open_store(self.location, config)

    def state_key(self, epoch: int, channel: str) -> str:
        return f"epoch-{epoch}/state/{channel}.parquet"

    def rocks_key(self, epoch: int, channel: str) -> str:
        return f"epoch-{epoch}/state/{channel}.rocks"

    def inflight_key(self, epoch: int, name: str) -> str:
        return f"epoch-{epoch}/inflight/{name}.arrow"

    def write_state(self, epoch: int, channel: str, step: int, table: pa.Table | None) -> ChannelSnapshot:
        key = self.state_key(epoch, channel)
        if table is None:
            snap = ChannelSnapshot(channel, step, "", 0, 0)
        else:
            sink = pa.BufferOutputStream()
            pq.write_table(table, sink)
            data = sink.getvalue().to_pybytes()
            self.store.put(key, data)
            snap = ChannelSnapshot(channel, step, key, table.num_rows, len(data))
        return self.record_snapshot(epoch, snap)

    def record_snapshot(self, epoch: int, snap: ChannelSnapshot) -> ChannelSnapshot:
        """Write what a channel's snapshot of ``epoch`` is (its ``.json`` beside the state), whichever
        backend wrote the state itself; the manifest and a restore read it from there."""
        self.store.put(f"epoch-{epoch}/state/{snap.channel}.json", json.dumps(vars(snap)).encode())
        return snap

    def read_table(self, key: str) -> pa.Table:
        """A Parquet snapshot's rows (read in place from a directory, fetched whole from a bucket)."""
        local = self.store.local_path(key)
        return pq.read_table(local if local is not None else io.BytesIO(self.store.get(key)))

    def read_state(self, snapshot: dict[str, Any]) -> pa.Table | None:
        if not snapshot["path"]:
            return None
        return self.read_table(snapshot["path"])

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        self.store.put(f"epoch-{manifest['epoch']}/manifest.json", json.dumps(manifest, indent=1).encode())

    def manifest(self, epoch: int) -> dict[str, Any] | None:
        try:
            return dict(json.loads(self.store.get(f"epoch-{epoch}/manifest.json")))
        except FileNotFoundError:
            return None

    def _epochs(self) -> dict[int, list[str]]:
        """Every epoch with an object in storage, and its keys."""
        out: dict[int, list[str]] = {}
        for key in self.store.list("epoch-"):
            m = _EPOCH.match(key.partition("/")[0])
            if m:
                out.setdefault(int(m.group(1)), []).append(key)
        return out

    def committed_epochs(self) -> list[int]:
        """Epochs whose manifest is present (what ``checkpoints()`` answers)."""
        return sorted(e for e, keys in self._epochs().items() if f"epoch-{e}/manifest.json" in keys)

    def size_bytes(self, epoch: int) -> int:
        """What the checkpoint of ``epoch`` wrote: its own files and the shared ones it uploaded."""
        own = sum(self.store.sizes(f"epoch-{epoch}/").values())
        return own + sum(int(doc.get("shared_bytes", 0)) for doc in self._listings(epoch))

    def prune(self, keep: set[int]) -> None:
        """Delete every epoch not in ``keep`` (old, aborted or superseded checkpoints)."""
        epochs = self._epochs()
        dropped = [e for e in epochs if e not in keep]
        # A table file named only by dropped checkpoints is deleted. One a checkpoint still being
        # written names is safe: its files were live at the newest kept checkpoint too (a table
        # file, once compacted away, never returns), or were uploaded by that checkpoint itself.
        unused = set().union(*(self.shared_files(e) for e in dropped)) - set().union(*(self.shared_files(e) for e in keep))
        for epoch in dropped:  # the whole prefix: a directory's temporary files of a killed writer too
            self.store.delete_prefix(f"epoch-{epoch}/")
        self.store.delete(sorted(unused))

    def _listings(self, epoch: int) -> list[dict[str, Any]]:
        docs = []
        for key in self.store.list(f"epoch-{epoch}/state/"):
            if not key.endswith(f".rocks/{SHARED_LISTING}"):
                continue
            try:
                docs.append(json.loads(self.store.get(key)))
            except (OSError, ValueError):
                continue  # a listing being written or gone: its checkpoint is not committed
        return docs

    def shared_files(self, epoch: int) -> set[str]:
        """The shared table files the checkpoint of ``epoch`` names."""
        return {name for doc in self._listings(epoch) for name in doc.get("files", {}).values()}

    def reset(self) -> None:
        self.store.delete_prefix()
