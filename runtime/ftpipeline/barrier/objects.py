"""The Parquet barrier on an object store: a step becomes visible through one conditional write, not a rename.

``bundles.py`` releases a step by renaming its staged directory, which an
object store cannot do (a "rename" there is a copy of every object, seen
one at a time). Here a step's output is visible when its *commit object*
exists, and that object is written with put-if-absent (``If-None-Match:
*``): one release wins, any later one (a replay, a second releaser, a
zombie) is refused. The commit names the data files of the step, and a
reader reads exactly those. Layout under the sink's ``s3://bucket/prefix``::

    _staging/step=S/part-<c>.parquet      a channel's staged part (replaced whole by a re-run)
    _staging/step=S/part-<c>.json         its row count, written after it
    step=S/part-<c>-<token>.parquet       the released data: copies of the staged parts, under the
                                          name of the release attempt (``token``)
    _commits/<S, 12 digits>.json          the commit: {"step", "gt_last", "parts", "rows"}

States of one step::

    absent --stage(part)--> staged
    staged --release: copy each part to step=S/ under a new token, then put-if-absent the commit--> released
    staged --crash before the commit--> staged       (its copies are named by no commit: invisible; the
                                                      next release copies again under its own token)
    released --release again (replay, zombie)--> released   (its commit is refused; its copies are
                                                      named by no commit, and deleted when seen)

``GT_last`` is the newest commit. **What a reader must read**: the files the
commit objects name (``committed_files`` / ``read_released``), never a
listing of ``step=*/``, which may also hold the copies of a release that
lost or crashed. A zombie's late write is therefore invisible: its parts go
to ``_staging`` (or to copies no commit names), and its commit is refused.
"""

from __future__ import annotations

import json
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

STAGING = "_staging"
COMMITS = "_commits"


def commit_key(step: int) -> str:
    return f"{COMMITS}/{step:012d}.json"


class ObjectBundleSink:
    def __init__(self, uri: str, config: S3Config | None = None, store: ObjectStore | None = None) -> None:
        self.uri = uri
        self.store = store or open_store(uri, config)
        self._gt: int | None = None  # GT_last as this process last saw it (it only grows)

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

    def has_staged(self) -> bool:
        return bool(self.store.list(f"{STAGING}/"))

    def stage(self, step: int, channel: int, table: pa.Table) -> bool:
        return self.stage_batches(step, channel, table.schema, [table])

    def stage_batches(self, step: int, channel: int, schema: pa.Schema, tables: Iterable[pa.Table]) -> bool:
        """Stage one channel's part of ``step`` (written to a local file, then uploaded whole); False (dropped)
        if the step is already released: its commit exists (one HEAD; a replay after a rollback re-runs
        released steps, whose parts must not be uploaded again)."""
        if (self._gt is not None and step <= self._gt) or self.store.size(commit_key(step)) is not None:
            return False
        scratch = Path(tempfile.mkdtemp(prefix="ftpipeline-part-"))
        try:
            write_part_file(scratch, channel, schema, tables)
            local = scratch / part_name(channel)
            rows = pq.ParquetFile(local).metadata.num_rows
            key = f"{STAGING}/step={step}/{part_name(channel)}"
            self.store.upload(key, local)
            self.store.put(key.removesuffix(".parquet") + ".json", json.dumps({"rows": rows}).encode())
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        return True

    def release(self, step: int, channels: int) -> bool:
        """Release ``step``: True if this call made it visible, False if it already was (idempotent)."""
        gt = self._gt if self._gt is not None and self._gt == step - 1 else self.gt_last()
        staged = f"{STAGING}/step={step}/"
        if step <= gt:
            self.store.delete_prefix(staged)  # parts a replay staged before it knew
            return False
        if step != gt + 1:
            raise RuntimeError(f"barrier: cannot release step {step} before step {gt + 1}")
        keys = set(self.store.list(staged))
        names = [part_name(c) for c in range(channels)]
        missing = [n for n in names if staged + n not in keys or staged + n.removesuffix(".parquet") + ".json" not in keys]
        if missing and self.gt_last() >= step:  # released by another worker, which dropped the parts
            return False
        if missing:
            raise RuntimeError(f"barrier: step {step} has {channels - len(missing)} of {channels} parts staged")
        token = secrets.token_hex(6)
        parts, rows = [], 0
        try:
            for name in names:
                data = f"step={step}/{name.removesuffix('.parquet')}-{token}.parquet"
                self.store.copy(staged + name, data)
                parts.append(data)
                rows += int(json.loads(self.store.get(staged + name.removesuffix(".parquet") + ".json"))["rows"])
        except FileNotFoundError:
            # another releaser committed the step and dropped the staged parts under us
            if self.gt_last() >= step:
                self.store.delete(parts)
                return False
            raise
        commit = json.dumps({"step": step, "gt_last": step, "parts": parts, "rows": rows}).encode()
        won = self.store.put_if_absent(commit_key(step), commit)
        self._gt = step
        committed = list(self._bundle(step).parts)  # as stored: whoever won, only its files are kept
        # what is not the commit's is nobody's: the copies of a lost or crashed attempt, and the staged parts
        self.store.delete([k for k in self.store.list(f"step={step}/") if k not in committed])
        self.store.delete_prefix(staged)
        return won

    def clear_staging(self) -> None:
        """Drop every staged part (an earlier run's, never released)."""
        self.store.delete_prefix(f"{STAGING}/")

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
    tables = []
    for step, keys in sorted(committed_files(uri, up_to, config, store).items()):
        for key in keys:
            table = pq.read_table(pa.BufferReader(store.get(key)))
            tables.append(table.append_column("step", pa.array([step] * table.num_rows, pa.int32())))
    if not tables:
        return pa.table({})
    return pa.concat_tables(tables, promote_options="default")
