"""The Parquet barrier on an object store: a step becomes visible through one conditional write, not a rename.

``bundles.py`` releases a step by renaming its staged directory, which an
object store cannot do (a "rename" there is a copy of every object, seen
one at a time). Here a step's output is visible when its *commit object*
exists, and that object is written with put-if-absent (``If-None-Match:
*``): one release wins, any later one (a replay, a second releaser, a
zombie) is refused. The commit names the data files of the step, one per
channel, and a reader reads exactly those. Layout under the sink's
``s3://bucket/prefix``::

    step=S/part-<c>-<token>-<rows>r.parquet   a channel's part as one task wrote it (a re-run of the task
                                              writes another token; its rows are in its name)
    _commits/<S, 12 digits>.json              the commit: {"step", "gt_last", "parts", "rows"}

States of one step::

    absent --stage(part)--> staged              (a part under step=S/, named by no commit)
    staged --release: one part of each channel named in a commit, put if absent--> released
    staged --crash before the commit--> staged  (the next release commits)
    released --stage again (a replay)--> released      (dropped: its commit exists; a zombie with a
                                                       stale view writes a part no commit names)
    released --release again (replay, zombie)--> released   (its commit is refused)

A release is two requests whatever the step's size (list the step's
parts, put the commit; a third reads the commit back when another writer's
won) and no data is copied. Parts that no
commit names (a task re-run, a zombie's late write) are deleted when the
release sees them. ``GT_last`` is the newest commit.

**What a reader must read**: the files the commit objects name
(``committed_files`` / ``read_released``), never a listing of ``step=*/``,
which may also hold a step being staged, a part written twice, or a
zombie's late part. A zombie's late write is therefore invisible: its part
is named by no commit, and its commit is refused.
"""

from __future__ import annotations

import json
import re
import secrets
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from ftpipeline.barrier.bundles import Bundle, part_name, write_part_file
from ftpipeline.objectstore.base import ObjectStore, open_store
from ftpipeline.objectstore.config import S3Config

COMMITS = "_commits"
_PART = re.compile(r"^step=(\d+)/part-(\d+)-([0-9a-f]+)-(\d+)r\.parquet$")


def commit_key(step: int) -> str:
    return f"{COMMITS}/{step:012d}.json"


IN_MEMORY = 64 << 20  # a part of an in-memory table up to this size is encoded in memory, not in a scratch file


class ObjectBundleSink:
    def __init__(self, uri: str, config: S3Config | None = None, store: ObjectStore | None = None) -> None:
        self.uri = uri
        self.store = store or open_store(uri, config)
        self._gt: int | None = None  # GT_last as this process last saw it (it only grows)
        self._newest = 0  # the newest step this process staged a part of: an older one is a replay

    def _bundle(self, step: int) -> Bundle:
        doc = json.loads(self.store.get(commit_key(step)))
        return Bundle(int(doc["step"]), int(doc["gt_last"]), tuple(doc["parts"]), int(doc["rows"]))

    def released_steps(self) -> list[int]:
        steps = [int(k[len(COMMITS) + 1:].removesuffix(".json")) for k in self.store.list(f"{COMMITS}/")
                 if k.endswith(".json")]
        return sorted(steps)

    def gt_last(self) -> int:
        steps = self.released_steps()
        self._gt = steps[-1] if steps else 0
        return self._gt

    def last_bundle(self) -> Bundle | None:
        gt = self.gt_last()
        return self._bundle(gt) if gt else None

    def _unreleased(self) -> list[str]:
        """Parts of steps after GT_last: staged, never released."""
        gt = self.gt_last()
        return [k for k in self.store.list("step=") if (m := _PART.match(k)) and int(m.group(1)) > gt]

    def has_staged(self) -> bool:
        return bool(self._unreleased())

    def stage(self, step: int, channel: int, table: pa.Table) -> bool:
        """A part held in memory whole (not spilled): encoded in memory and put in one request, with no
        scratch file written and read back (a step's part is mostly far below ``IN_MEMORY``)."""
        if table.nbytes > IN_MEMORY:
            return self.stage_batches(step, channel, table.schema, [table])
        if not self._may_stage(step):
            return False
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink)
        self.store.put(self._part_key(step, channel, table.num_rows), sink.getvalue().to_pybytes())
        return True

    def _may_stage(self, step: int) -> bool:
        """False if ``step`` is already released. A step newer than any this process staged is not released
        yet (releases follow the steps' tasks); an older one may be (a replay after a rollback or a
        recovery): its commit is looked for (one HEAD), and its part not written again."""
        gt = self.gt_last() if self._gt is None else self._gt  # once per process: a replacement's replays stop here
        if step <= gt:
            return False
        if step <= self._newest and self.store.size(commit_key(step)) is not None:
            return False
        self._newest = max(self._newest, step)
        return True

    @staticmethod
    def _part_key(step: int, channel: int, rows: int) -> str:
        return f"step={step}/part-{channel:05d}-{secrets.token_hex(6)}-{rows}r.parquet"

    def stage_batches(self, step: int, channel: int, schema: pa.Schema, tables: Iterable[pa.Table]) -> bool:
        """Stage one channel's part of ``step`` (written to a local file, then uploaded whole under a name of its
        own); False (dropped) if the step is already released (``_may_stage``)."""
        if not self._may_stage(step):
            return False
        scratch = Path(tempfile.mkdtemp(prefix="ftpipeline-part-"))
        try:
            write_part_file(scratch, channel, schema, tables)
            local = scratch / part_name(channel)
            rows = pq.ParquetFile(local).metadata.num_rows
            self.store.upload(self._part_key(step, channel, rows), local)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        return True

    def release(self, step: int, channels: int) -> bool:
        """Release ``step``: True if this call made it visible, False if it already was (idempotent)."""
        gt = self._gt if self._gt is not None and self._gt == step - 1 else self.gt_last()
        if step <= gt:
            return False
        if step != gt + 1:
            raise RuntimeError(f"barrier: cannot release step {step} before step {gt + 1}")
        found = self.store.list(f"step={step}/")
        chosen: dict[int, tuple[str, int]] = {}
        for key in found:  # one part of each channel of the current parallelism (any: a re-run's is the same)
            m = _PART.match(key)
            if m and int(m.group(2)) < channels:
                chosen.setdefault(int(m.group(2)), (key, int(m.group(4))))
        if len(chosen) < channels:
            if self.gt_last() >= step:  # released meanwhile by another worker
                return False
            raise RuntimeError(f"barrier: step {step} has {len(chosen)} of {channels} parts staged")
        parts = [chosen[c][0] for c in range(channels)]
        commit = json.dumps({"step": step, "gt_last": step, "parts": parts,
                             "rows": sum(chosen[c][1] for c in range(channels))}).encode()
        won = self.store.put_if_absent(commit_key(step), commit)
        self._gt = step
        # as stored: whoever won, only its files are kept (this commit's own, when it won: no need to read it)
        committed = set(parts) if won else set(self._bundle(step).parts)
        self.store.delete([k for k in found if k not in committed])
        return won

    def clear_staging(self) -> None:
        """Drop every part of a step not released (an earlier run's)."""
        self.store.delete(self._unreleased())

    def reset(self) -> None:
        """Remove all output (a fresh run asked for it explicitly)."""
        self.store.delete_prefix()


def committed_files(uri: str, up_to: int | None = None, config: S3Config | None = None,
                    store: ObjectStore | None = None) -> dict[int, list[str]]:
    """step -> the data files its commit names (keys under ``uri``), for steps up to ``up_to``: what a reader of
    the sink's output reads."""
    sink = ObjectBundleSink(uri, config, store)
    out: dict[int, list[str]] = {}
    for step in sink.released_steps():
        if up_to is None or step <= up_to:
            out[step] = list(sink._bundle(step).parts)
    return out


def read_released(uri: str, up_to: int | None = None, config: S3Config | None = None,
                  store: ObjectStore | None = None) -> pa.Table:
    """The released rows of a sink on an object store, with their ``step`` (as a hive-partitioned reader of a
    local sink's directory gives it)."""
    store = store or open_store(uri, config)
    return read_steps(store, [(step, key) for step, keys in sorted(committed_files(uri, up_to, config, store).items())
                              for key in keys])


def read_steps(store: ObjectStore, parts: Iterable[tuple[int, str]]) -> pa.Table:
    """The rows of Parquet objects, each (step, key), with their ``step`` as a column (an empty table for none)."""
    tables = []
    for step, key in parts:
        table = pq.read_table(pa.BufferReader(store.get(key)))
        tables.append(table.append_column("step", pa.array([step] * table.num_rows, pa.int32())))
    return pa.concat_tables(tables, promote_options="default") if tables else pa.table({})
