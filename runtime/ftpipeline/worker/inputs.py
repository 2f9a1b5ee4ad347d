"""Finding a task's inputs: local buffer, another worker over Flight, or checkpoint storage.

Quokka's guarantee is that an input a task needs is present somewhere or will
be produced; PT says where. A task is handed to the Spark process only when
every input is readable locally: objects of this worker are read in place,
objects of another worker are fetched into the cache (and deleted once the
task completes), objects saved in a checkpoint are read from its storage.
An input whose holder is unreachable (just lost) simply makes the task not
ready yet; recovery will move or regenerate it. A task's remote inputs are
fetched at once, each from its holder, so a hash edge's P objects cost one
round trip, not P.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow.flight as flight

from ftpipeline.checkpoint.storage import CheckpointStorage
from ftpipeline.control.store import RunStore
from ftpipeline.lineage.naming import STORAGE_NODE, WorkerId
from ftpipeline.lineage.tables import LineageTables
from ftpipeline.worker.buffer import WHOLE, ObjectBuffer, write_ipc_batches
from ftpipeline.worker.tls import Credentials
from ftpipeline.worker.transport import SidecarClient

log = logging.getLogger("ftpipeline.sidecar")


class InputResolver:
    def __init__(self, worker: WorkerId, tables: LineageTables, store: RunStore, buffer: ObjectBuffer,
                 credentials: Credentials | None = None) -> None:
        self.worker = worker
        self.credentials = credentials  # the pipeline's: a peer's listener refuses any other (``tls.py``)
        self.tables = tables
        self.store = store
        self.buffer = buffer
        self.storage: CheckpointStorage | None = None
        self._peers: dict[str, SidecarClient] = {}
        self._fetches = ThreadPoolExecutor(max_workers=8, thread_name_prefix="fetch")
        self.inflight_epoch = 0  # which checkpoint's in-flight objects PT's STORAGE_NODE refers to

    def resolve(self, names: list[str]) -> list[list[Any]] | None:
        """``[[name, local path, batch], ...]`` for every input (``batch``: the object's place in a bundle
        of this worker, or ``WHOLE`` for a file that is the object), or None if any is not available yet."""
        where = self.tables.locate(names)
        if any(w is None for w in where):
            return None
        out = []
        fetch: list[tuple[str, WorkerId, Path]] = []
        for name, holder in zip(names, where):
            batch = WHOLE
            if holder == self.worker:
                held = self.buffer.locate(name)
                if held is None:
                    return None
                path, batch = held
            elif holder == STORAGE_NODE:
                if self.storage is None:
                    return None
                inflight = self._inflight(name)
                if inflight is None:
                    return None
                path = inflight
            else:
                path = self.buffer.cache_path(name)
                if not path.exists():
                    fetch.append((name, WorkerId(str(holder)), path))
            out.append([name, str(path), batch])
        if len(fetch) == 1:
            fetched = [self._fetch(*fetch[0])]
        else:
            fetched = list(self._fetches.map(lambda f: self._fetch(*f), fetch))
        return out if all(fetched) else None

    def _inflight(self, name: str) -> Path | None:
        """An in-flight object of the restored checkpoint: its file in a storage directory, or fetched once from
        a bucket into the cache as a peer's objects are (None, logged: it is missing)."""
        assert self.storage is not None
        key = self.storage.inflight_key(self.inflight_epoch, name)
        path = self.storage.store.local_path(key)
        try:
            if path is None:
                path = self.buffer.cache_path(name)
                if not path.exists():
                    self.storage.store.download(key, path)
            elif not path.exists():
                raise FileNotFoundError(key)
        except FileNotFoundError:
            log.error("in-flight object missing from checkpoint storage",
                      extra={"object": name, "path": f"{self.storage.store.uri}/{key}"})
            return None
        return path

    def _fetch(self, name: str, holder: WorkerId, path: Path) -> bool:
        address = self.store.address(holder)
        if address is None:
            return False
        client = self._peers.get(address)
        if client is None:
            client = self._peers[address] = SidecarClient(address, timeout_s=10, credentials=self.credentials)
        try:
            write_ipc_batches(path, *client.fetch(name))
        except (flight.FlightError, OSError) as exc:
            log.warning("fetch failed", extra={"object": name, "holder": holder, "error": str(exc)})
            self._peers.pop(address, None)
            return False
        return True
