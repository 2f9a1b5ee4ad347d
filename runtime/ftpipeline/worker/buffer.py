"""The object buffer (Quokka's HBQ): Arrow IPC files on the worker's local disk.

Objects a worker produces stay in ``objects/`` until garbage collection finds
them in the cemetery; that buffering, not replication, is what lineage
recovery relies on, and it costs no network. Copies of inputs fetched from
other workers go to ``cache/`` and are deleted as soon as the task that read
them completes. The Spark process and the sidecar share the directory (in a
pod, an ``emptyDir`` volume): the Spark process writes outputs, the sidecar
serves and collects them.

Files are written to a temporary name and renamed, so a reader never sees a
partial object, and an object file exists iff it is complete.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pyarrow as pa


def write_ipc(path: Path, table: pa.Table) -> int:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with pa.OSFile(str(tmp), "wb") as sink:
        with pa.ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table)
    os.replace(tmp, path)
    return path.stat().st_size


def read_ipc(path: Path) -> pa.Table:
    with pa.memory_map(str(path), "r") as source:
        return pa.ipc.open_file(source).read_all()


class ObjectBuffer:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.objects = root / "objects"
        self.cache = root / "cache"

    def reset(self) -> None:
        for d in (self.objects, self.cache):
            if d.exists():
                shutil.rmtree(d)
            d.mkdir(parents=True)

    def object_path(self, name: str) -> Path:
        return self.objects / f"{name}.arrow"

    def cache_path(self, name: str) -> Path:
        return self.cache / f"{name}.arrow"

    def put(self, name: str, table: pa.Table) -> int:
        return write_ipc(self.object_path(name), table)

    def drop(self, name: str) -> None:
        self.object_path(name).unlink(missing_ok=True)

    def uncache(self, name: str) -> None:
        self.cache_path(name).unlink(missing_ok=True)

    def held_bytes(self) -> int:
        return sum(p.stat().st_size for p in self.objects.glob("*.arrow"))

    def held(self) -> int:
        return sum(1 for _ in self.objects.glob("*.arrow"))
