"""Checkpoint storage: snapshot files, in-flight messages and manifests on a shared directory.

Layout under ``<root>/<pipeline>/epoch-<e>/``::

    state/<stage>.<channel>.parquet   a stateful channel's state (``memory`` backend)
    state/<stage>.<channel>.rocks/    or its RocksDB checkpoint (``rocksdb``): the small files,
                                      and files.json naming its table files under shared/
    state/<stage>.<channel>.json      which step it reflects, rows, bytes
    inflight/<object>.arrow           older-epoch messages received after a checkpoint
    manifest.json                     the cut; written only after ZooKeeper committed it

and under ``<root>/<pipeline>/shared/<stage>.<channel>/`` the RocksDB table
files, each uploaded once and named by every checkpoint that needs it
(``state/rocks.py``); ``prune`` deletes one when no kept checkpoint does.

All files are written to a temporary name and renamed. Storage is a local
directory for ``ftpipeline run`` and a volume shared by the worker pods on
Kubernetes; it also serves as the "node" that holds in-flight objects
during a restore (the lineage tables point at it as :data:`STORAGE_NODE`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ftpipeline.checkpoint.tracker import ChannelSnapshot
from ftpipeline.lineage.naming import STORAGE_NODE

__all__ = ["STORAGE_NODE", "CheckpointStorage"]
SHARED_LISTING = "files.json"  # in a RocksDB snapshot's directory: the shared files it needs
_EPOCH = re.compile(r"^epoch-(\d+)$")


def atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


class CheckpointStorage:
    def __init__(self, root: Path, pipeline: str) -> None:
        self.root = root / pipeline

    def epoch_dir(self, epoch: int) -> Path:
        return self.root / f"epoch-{epoch}"

    def state_path(self, epoch: int, channel: str) -> Path:
        return self.epoch_dir(epoch) / "state" / f"{channel}.parquet"

    def rocks_path(self, epoch: int, channel: str) -> Path:
        return self.epoch_dir(epoch) / "state" / f"{channel}.rocks"

    def inflight_path(self, epoch: int, name: str) -> Path:
        return self.epoch_dir(epoch) / "inflight" / f"{name}.arrow"

    def write_state(self, epoch: int, channel: str, step: int, table: pa.Table | None) -> ChannelSnapshot:
        path = self.state_path(epoch, channel)
        path.parent.mkdir(parents=True, exist_ok=True)
        if table is None:
            snap = ChannelSnapshot(channel, step, "", 0, 0)
        else:
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            pq.write_table(table, tmp)
            os.replace(tmp, path)
            snap = ChannelSnapshot(channel, step, str(path.relative_to(self.root)), table.num_rows, path.stat().st_size)
        return self.record_snapshot(epoch, snap)

    def record_snapshot(self, epoch: int, snap: ChannelSnapshot) -> ChannelSnapshot:
        """Write what a channel's snapshot of ``epoch`` is (its ``.json`` beside the state), whichever
        backend wrote the state itself; the manifest and a restore read it from there."""
        atomic_write(self.state_path(epoch, snap.channel).with_suffix(".json"), json.dumps(vars(snap)).encode())
        return snap

    def read_state(self, snapshot: dict[str, Any]) -> pa.Table | None:
        if not snapshot["path"]:
            return None
        return pq.read_table(self.root / snapshot["path"])

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        directory = self.epoch_dir(manifest["epoch"])
        directory.mkdir(parents=True, exist_ok=True)
        atomic_write(directory / "manifest.json", json.dumps(manifest, indent=1).encode())

    def manifest(self, epoch: int) -> dict[str, Any] | None:
        path = self.epoch_dir(epoch) / "manifest.json"
        return json.loads(path.read_text()) if path.exists() else None

    def committed_epochs(self) -> list[int]:
        """Epochs whose manifest is present (what ``checkpoints()`` answers)."""
        if not self.root.is_dir():
            return []
        out = []
        for entry in self.root.iterdir():
            m = _EPOCH.match(entry.name)
            if m and (entry / "manifest.json").exists():
                out.append(int(m.group(1)))
        return sorted(out)

    def size_bytes(self, epoch: int) -> int:
        """What the checkpoint of ``epoch`` wrote: its own files and the shared ones it uploaded."""
        directory = self.epoch_dir(epoch)
        if not directory.exists():
            return 0
        return sum(p.stat().st_size for p in directory.rglob("*") if p.is_file()) + sum(int(doc.get("shared_bytes", 0)) for doc in self._listings(epoch))

    def prune(self, keep: set[int]) -> None:
        """Delete every epoch directory not in ``keep`` (old, aborted or superseded checkpoints)."""
        if not self.root.is_dir():
            return
        dropped = [int(m.group(1)) for e in self.root.iterdir() if (m := _EPOCH.match(e.name)) and int(m.group(1)) not in keep]
        # A table file named only by dropped checkpoints is deleted. One a checkpoint still being
        # written names is safe: its files were live at the newest kept checkpoint too (a table
        # file, once compacted away, never returns), or were uploaded by that checkpoint itself.
        unused = set().union(*(self.shared_files(e) for e in dropped)) - set().union(*(self.shared_files(e) for e in keep))
        for epoch in dropped:
            shutil.rmtree(self.epoch_dir(epoch), ignore_errors=True)
        for name in unused:
            (self.root / name).unlink(missing_ok=True)

    def _listings(self, epoch: int) -> list[dict[str, Any]]:
        docs = []
        for listing in self.epoch_dir(epoch).glob(f"state/*.rocks/{SHARED_LISTING}"):
            try:
                docs.append(json.loads(listing.read_text()))
            except (OSError, ValueError):
                continue  # a listing being written: its checkpoint is not committed
        return docs

    def shared_files(self, epoch: int) -> set[str]:
        """The shared table files the checkpoint of ``epoch`` names."""
        return {name for doc in self._listings(epoch) for name in doc.get("files", {}).values()}

    def reset(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
