"""The output barrier: each step is released as one atomic bundle with GT_last.

FlameStream's protocol, specialised to a directory of Parquet files:

- The barrier's state is ``GT_last``, the last released step. Anything at or
  below it that is produced again — by a replay after a failure — is dropped.
- Release is atomic with ``GT_last``: a step's parts are *staged* under
  ``_staging/step=S/`` (one file per sink channel, each written with
  write-to-temp-then-rename, so a re-run overwrites with identical content),
  then a manifest ``_BUNDLE.json`` saying ``gt_last: S`` is written into the
  staged directory, and the directory is renamed to ``step=S``. A rename is
  atomic, so a reader sees either no trace of step S or all of it, and
  ``GT_last`` (the largest ``step=`` directory) can never disagree with the
  released data.
- The barrier does not release S+1 before S is acknowledged (released): the
  lockstep coordinator only asks for S+1 after S.
- "The consumer must return the last received bundle": :meth:`last_bundle`
  reads it back from the directory, which is how a restarted runtime learns
  ``GT_last``.

States of one step's output::

    absent --stage(part)--> staged --release--> released
    released --stage/release (replay)--> released   (dropped: step <= GT_last)

Readers such as ``spark.read.parquet(path)`` ignore names starting with ``_``,
so they see released steps only, with ``step`` as a partition column.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

_STEP_DIR = re.compile(r"^step=(\d+)$")
MANIFEST = "_BUNDLE.json"


@dataclass(frozen=True)
class Bundle:
    step: int
    gt_last: int
    parts: tuple[str, ...]
    rows: int


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_part_file(directory: Path, channel: int, schema: pa.Schema, tables: Iterable[pa.Table]) -> None:
    """One channel's part of a step as ``directory/part-<channel>.parquet``, written to a temporary name and
    renamed, so a re-run replaces it whole (this barrier's staging, and a Delta sink's)."""
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".part-{channel:05d}.{os.getpid()}.tmp"
    with pq.ParquetWriter(tmp, schema) as writer:
        for table in tables:
            writer.write_table(table)
    os.replace(tmp, directory / part_name(channel))


def part_name(channel: int) -> str:
    return f"part-{channel:05d}.parquet"


def staged_parts(directory: Path, channels: int) -> list[Path]:
    """The parts of a staged step, one per channel of ``channels`` present; a part of a channel beyond them is
    an earlier run's, staged before the sink's parallelism was lowered (``checkpoint/rescale.py``): it is
    deleted, never released."""
    if not directory.is_dir():
        return []
    names = [part_name(c) for c in range(channels)]
    for stale in directory.glob("part-*.parquet"):
        if stale.name not in names:
            stale.unlink(missing_ok=True)
    return [directory / n for n in names if (directory / n).exists()]


class ParquetBundleSink:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.staging = path / "_staging"

    def released_steps(self) -> list[int]:
        if not self.path.is_dir():
            return []
        steps = []
        for entry in self.path.iterdir():
            m = _STEP_DIR.match(entry.name)
            if m and entry.is_dir():
                steps.append(int(m.group(1)))
        return sorted(steps)

    def gt_last(self) -> int:
        steps = self.released_steps()
        return steps[-1] if steps else 0

    def last_bundle(self) -> Bundle | None:
        gt = self.gt_last()
        if gt == 0:
            return None
        doc = json.loads((self.path / f"step={gt}" / MANIFEST).read_text())
        return Bundle(doc["step"], doc["gt_last"], tuple(doc["parts"]), doc["rows"])

    def stage(self, step: int, channel: int, table: pa.Table) -> bool:
        """Stage one channel's part of ``step``; False (dropped) if already released."""
        return self.stage_batches(step, channel, table.schema, [table])

    def stage_batches(self, step: int, channel: int, schema: pa.Schema, tables: Iterable[pa.Table]) -> bool:
        """``stage`` of a part written a table at a time (a large task's, ``dataflow/spill.py``)."""
        if step <= self.gt_last():
            return False
        try:
            write_part_file(self.staging / f"step={step}", channel, schema, tables)
        except FileNotFoundError:
            # released by another worker between our check and our write: at or below GT_last now
            if step <= self.gt_last():
                return False
            raise
        return True

    def release(self, step: int, channels: int) -> bool:
        """Release ``step`` atomically; False if it was already released (idempotent)."""
        gt = self.gt_last()
        if step <= gt:
            return False
        if step != gt + 1:
            raise RuntimeError(f"barrier: cannot release step {step} before step {gt + 1}")
        directory = self.staging / f"step={step}"
        parts = [p.name for p in staged_parts(directory, channels)]
        if len(parts) != channels:
            raise RuntimeError(f"barrier: step {step} has {len(parts)} of {channels} parts staged")
        rows = sum(pq.ParquetFile(directory / p).metadata.num_rows for p in parts)
        manifest = directory / MANIFEST
        manifest.write_text(json.dumps({"step": step, "gt_last": step, "parts": parts, "rows": rows}))
        for p in [*parts, MANIFEST]:
            with open(directory / p, "rb") as f:
                os.fsync(f.fileno())
        _fsync_dir(directory)
        os.rename(directory, self.path / f"step={step}")
        _fsync_dir(self.path)
        return True

    def has_staged(self) -> bool:
        return self.staging.exists()

    def reset(self) -> None:
        """Remove all output (a fresh run asked for it explicitly)."""
        if self.path.exists():
            shutil.rmtree(self.path)
