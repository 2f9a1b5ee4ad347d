"""The object buffer (Quokka's HBQ): Arrow IPC files on the worker's local disk.

Objects a worker produces stay in ``objects/`` until garbage collection finds
them in the cemetery; that buffering, not replication, is what lineage
recovery relies on, and it costs no network. Copies of inputs fetched from
other workers go to ``cache/`` and are deleted as soon as the task that read
them completes. The Spark process and the sidecar share the directory (in a
pod, an ``emptyDir`` volume): the Spark process writes outputs, the sidecar
serves and collects them.

One task writes one *bundle* file, not one file per object: a record batch
per object (objects with the same rows, a forward and a broadcast edge,
share one batch), and the names in the file's schema metadata. So a hash
edge of P producers and C consumers costs P files a step, not P × C, while
lineage still names, locates, fetches and collects each object on its own.
A task too large to hold (``dataflow/spill.py``) writes each object as a
file of its own instead, a batch at a time as Spark's result is read.
A bundle is deleted when the last of its objects is collected.

    WRITTEN  --task_done: the sidecar indexes its objects-->  HELD(objects)
    HELD(n)  --GC drops one object-->  HELD(n - 1)  ...  HELD(0): the file is deleted

Files are written to a temporary name and renamed, so a reader never sees a
partial bundle, and a bundle file exists iff it is complete.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa

WHOLE = -1  # a location's batch for a file that is one object (a fetched copy, a saved in-flight message)
_NAMES = b"ftpipeline.objects"


def _plain(file: str) -> bool:
    """A name of a file directly in ``objects/``: no path component, not hidden (temporary)."""
    return bool(file) and "/" not in file and "\\" not in file and not file.startswith(".") and file.endswith(".arrow")


def _tmp(path: Path) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


def write_ipc(path: Path, table: pa.Table) -> int:
    write_ipc_batches(path, table.schema, table.to_batches())
    return path.stat().st_size


def ipc_bytes(table: pa.Table) -> bytes:
    """``table`` as the bytes of an Arrow IPC file (an object written whole to a store)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def write_ipc_batches(path: Path, schema: pa.Schema, batches: Iterable[pa.RecordBatch]) -> int:
    """An Arrow IPC file of ``batches``, written as they come (a streamed object is never held whole),
    to a temporary name and renamed: ``path`` exists iff complete. Returns its rows."""
    tmp = _tmp(path)
    rows = 0
    try:
        with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_file(sink, schema) as writer:
            for batch in batches:
                writer.write_batch(batch)
                rows += batch.num_rows
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, path)
    return rows


def read_ipc(path: Path, batch: int = WHOLE) -> pa.Table:
    """The whole file, or the one object at ``batch`` of a bundle."""
    with pa.memory_map(str(path), "r") as source:
        reader = pa.ipc.open_file(source)
        if batch == WHOLE:
            return reader.read_all()
        meta = {k: v for k, v in (reader.schema.metadata or {}).items() if k != _NAMES}
        return pa.Table.from_batches([reader.get_batch(batch)], schema=reader.schema.with_metadata(meta))


def _one_batch(table: pa.Table) -> pa.RecordBatch:
    if table.num_rows == 0:
        return pa.RecordBatch.from_pylist([], schema=table.schema)
    [batch] = table.combine_chunks().to_batches(max_chunksize=table.num_rows)
    return batch


def write_bundle(path: Path, objects: dict[str, pa.Table]) -> dict[str, int]:
    """Write ``objects`` (one schema) as one file; returns each object's batch index."""
    tables = list(objects.values())
    schema = tables[0].schema
    batches: list[pa.RecordBatch] = []
    index: dict[str, int] = {}
    seen: dict[int, int] = {}  # id(table) -> its batch: an edge that sends every row shares the batch
    for name, table in objects.items():
        if not table.schema.equals(schema):
            raise ValueError(f"object {name} has another schema than the rest of its bundle")
        if id(table) not in seen:
            seen[id(table)] = len(batches)
            batches.append(_one_batch(table))
        index[name] = seen[id(table)]
    meta = {_NAMES: json.dumps(index, separators=(",", ":")).encode()}
    tmp = _tmp(path)
    with pa.OSFile(str(tmp), "wb") as sink:
        with pa.ipc.new_file(sink, schema.with_metadata({**(schema.metadata or {}), **meta})) as writer:
            for batch in batches:
                writer.write_batch(batch)
    os.replace(tmp, path)
    return index


class ObjectBuffer:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.objects = root / "objects"
        self.cache = root / "cache"
        self._lock = threading.Lock()
        self._where: dict[str, tuple[Path, int]] = {}  # object -> (bundle, batch)
        self._members: dict[Path, set[str]] = {}        # bundle -> its objects not yet collected

    def reset(self) -> None:
        """Forget every object. A task of the run being reopened may still be writing into the directories
        (the Spark process is not stopped for it): they are moved aside first, so its late file lands in
        the old directory or fails, and removing them never races with it."""
        with self._lock:
            self._where.clear()
            self._members.clear()
        for d in (self.objects, self.cache):
            if d.exists():
                aside = d.with_name(f".{d.name}-{uuid.uuid4().hex[:8]}")
                os.replace(d, aside)
                shutil.rmtree(aside, ignore_errors=True)
            d.mkdir(parents=True, exist_ok=True)

    # --- the Spark process -------------------------------------------------
    def put_bundle(self, key: str, objects: dict[str, pa.Table]) -> list[list[object]]:
        """Write one task's output objects; returns ``[name, rows, bundle file, batch]`` for each."""
        if not objects:
            return []
        by_schema: dict[pa.Schema, dict[str, pa.Table]] = {}
        for name, table in objects.items():
            group = next((g for s, g in by_schema.items() if s.equals(table.schema)), None)
            if group is None:
                group = by_schema[table.schema] = {}
            group[name] = table
        out: list[list[object]] = []
        for group in by_schema.values():
            path, n = self.objects / f"{key}.arrow", 0
            while path.exists():  # the same task again on this worker (a recovery): never overwrite what is indexed
                n += 1
                path = self.objects / f"{key}.{n}.arrow"
            for name, batch in write_bundle(path, group).items():
                out.append([name, objects[name].num_rows, path.name, batch])
        return out

    def put_streamed(self, key: str, pieces: Iterable[dict[str, pa.Table]]) -> list[list[object]]:
        """Write a large task's objects a piece at a time (``dataflow/spill.py``); same return as ``put_bundle``.

        Each object is a file of its own (batch ``WHOLE``), of a batch per
        piece; objects with the same rows (a forward or broadcast edge's:
        ``split`` gives them one table) are one file under several names, hard
        links, so each is still collected on its own. Every piece names the same
        objects; the first one fixes which of them share rows.
        """
        groups: list[list[str]] = []
        writers: list[pa.ipc.RecordBatchFileWriter] = []
        files: list[Any] = []
        rows: list[int] = []
        stem, n = key, 0
        while (self.objects / f"{stem}.o0.arrow").exists():  # the same task again here: keep what is indexed
            n += 1
            stem = f"{key}.{n}"
        paths = []
        try:
            for piece in pieces:
                if not groups:
                    if not piece:
                        return []
                    shared: dict[int, list[str]] = {}
                    for name, table in piece.items():
                        shared.setdefault(id(table), []).append(name)
                    groups = list(shared.values())
                    for i, group in enumerate(groups):
                        paths.append(self.objects / f"{stem}.o{i}.arrow")
                        files.append(pa.OSFile(str(_tmp(paths[-1])), "wb"))
                        writers.append(pa.ipc.new_file(files[-1], piece[group[0]].schema))
                        rows.append(0)
                for i, group in enumerate(groups):
                    table = piece[group[0]]
                    writers[i].write_table(table)
                    rows[i] += table.num_rows
        except BaseException:
            for f in files:
                f.close()
            for path in paths:
                _tmp(path).unlink(missing_ok=True)
            raise
        out: list[list[object]] = []
        for i, group in enumerate(groups):
            writers[i].close()
            files[i].close()
            os.replace(_tmp(paths[i]), paths[i])
            for j, name in enumerate(group):
                path = paths[i] if j == 0 else paths[i].with_name(f"{paths[i].stem}.{j}.arrow")
                if j:
                    os.link(paths[i], path)
                out.append([name, rows[i], path.name, WHOLE])
        return out

    # --- the sidecar -------------------------------------------------------
    def index(self, outputs: list[list[object]]) -> None:
        """A task's objects, as ``put_bundle`` returned them, are held here from now on. An object held
        already (the same task ran twice here) keeps its first copy: tasks are deterministic."""
        for _, _, file, _ in outputs:  # from the Spark process, which runs user code: only its own files
            if not _plain(str(file)):
                raise ValueError(f"task output {str(file)[:120]!r} is not a file of {self.objects}")
        with self._lock:
            for name, _, file, batch in outputs:
                if str(name) not in self._where:
                    path = self.objects / str(file)
                    self._where[str(name)] = (path, int(str(batch)))
                    self._members.setdefault(path, set()).add(str(name))
        self._delete_unused({str(o[2]) for o in outputs})

    def locate(self, name: str) -> tuple[Path, int] | None:
        """Where a held object is: (bundle, batch), or None if this worker does not hold it."""
        with self._lock:
            return self._where.get(name)

    def read(self, name: str) -> pa.Table | None:
        where = self.locate(name)
        return None if where is None else read_ipc(*where)

    def unindex(self, outputs: list[list[object]]) -> None:
        """A completion the lineage tables refused: its objects are nobody's (unless held from before)."""
        with self._lock:
            for name, _, file, batch in outputs:
                path = self.objects / str(file)
                if self._where.get(str(name)) == (path, int(str(batch))):
                    del self._where[str(name)]
                    self._members.get(path, set()).discard(str(name))
        self._delete_unused({str(o[2]) for o in outputs})

    def _delete_unused(self, files: set[str]) -> None:
        for file in files:
            path = self.objects / file
            with self._lock:
                if self._members.get(path):
                    continue
                self._members.pop(path, None)
            path.unlink(missing_ok=True)

    def drop(self, name: str) -> None:
        with self._lock:
            where = self._where.pop(name, None)
            if where is None:
                return
            members = self._members.get(where[0], set())
            members.discard(name)
            if members:
                return
            self._members.pop(where[0], None)
        where[0].unlink(missing_ok=True)

    def cache_path(self, name: str) -> Path:
        return self.cache / f"{name}.arrow"

    def uncache(self, name: str) -> None:
        self.cache_path(name).unlink(missing_ok=True)

    def held_bytes(self) -> int:
        return sum(p.stat().st_size for p in self.objects.glob("*.arrow"))

    def held(self) -> int:
        with self._lock:
            return len(self._where)
