"""The committed checkpoint in ZooKeeper: the resume point, changed atomically.

FlameStream writes the global time of a complete snapshot to ZooKeeper; here
the znodes are::

    /ftpipeline/<pipeline>/checkpoints/<epoch>   the manifest (the cut)
    /ftpipeline/<pipeline>/latest                the epoch of the newest committed one

A commit creates the epoch's znode and moves ``latest`` in *one* ZooKeeper
transaction, guarded by the version of ``latest`` read beforehand: either
both happen or neither, so a session expiry or a lost connection during a
checkpoint can never leave a half-committed one, and two coordinators cannot
both move ``latest`` from the same value. What is safe while the connection
is SUSPENDED: nothing is committed until the transaction returns; a commit
whose outcome is unknown (connection lost in flight) is re-checked by reading
``latest`` back.
"""

from __future__ import annotations

import json
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.retry import KazooRetry

from ftpipeline.commandlog.zklog import base_path


class CommitFailed(RuntimeError):
    pass


class CheckpointPointer:
    def __init__(self, zk: KazooClient, pipeline: str, retry: KazooRetry | None = None) -> None:
        self.zk = zk
        self.base = base_path(pipeline)
        self.retry = retry or KazooRetry(max_tries=3, delay=0.05, max_delay=1.0)

    def _ensure(self) -> int:
        self.retry(self.zk.ensure_path, f"{self.base}/checkpoints")
        try:
            self.zk.create(f"{self.base}/latest", b"0")
        except NodeExistsError:
            pass
        _, stat = self.retry(self.zk.get, f"{self.base}/latest")
        return int(stat.version)

    def commit(self, manifest: dict[str, Any]) -> None:
        version = self._ensure()
        epoch = int(manifest["epoch"])
        tx = self.zk.transaction()
        tx.create(f"{self.base}/checkpoints/{epoch}", json.dumps(manifest).encode())
        tx.set_data(f"{self.base}/latest", str(epoch).encode(), version=version)
        results = tx.commit()
        failures = [r for r in results if isinstance(r, Exception)]
        if failures:
            kinds = ", ".join(type(f).__name__ for f in failures)
            raise CommitFailed(f"checkpoint {epoch} not committed ({kinds})")

    def latest_epoch(self) -> int:
        try:
            data, _ = self.retry(self.zk.get, f"{self.base}/latest")
        except NoNodeError:
            return 0
        return int(data or b"0")

    def manifest(self, epoch: int) -> dict[str, Any] | None:
        try:
            data, _ = self.retry(self.zk.get, f"{self.base}/checkpoints/{epoch}")
        except NoNodeError:
            return None
        return dict(json.loads(data))

    def epochs(self) -> list[int]:
        """The committed checkpoints still kept (retention prunes older ones), oldest first."""
        try:
            children = self.retry(self.zk.get_children, f"{self.base}/checkpoints")
        except NoNodeError:
            return []
        return sorted(int(c) for c in children)

    def latest(self) -> dict[str, Any] | None:
        epoch = self.latest_epoch()
        return self.manifest(epoch) if epoch else None

    def prune(self, keep: set[int]) -> None:
        try:
            children = self.retry(self.zk.get_children, f"{self.base}/checkpoints")
        except NoNodeError:
            return
        for child in children:
            if int(child) not in keep:
                try:
                    self.zk.delete(f"{self.base}/checkpoints/{child}")
                except (NoNodeError, BadVersionError):
                    pass

    def clear(self, keep_base: bool = False) -> None:
        """Every znode of the pipeline. ``keep_base``: its base path stays (empty), as a pipeline's own
        identity must leave it, since only the operator may create or delete it (``commandlog/zkaccess.py``)."""
        if not self.zk.exists(self.base):
            return
        if not keep_base:
            self.retry(self.zk.delete, self.base, recursive=True)
            return
        for child in self.retry(self.zk.get_children, self.base):
            try:
                self.retry(self.zk.delete, f"{self.base}/{child}", recursive=True)
            except NoNodeError:
                pass
