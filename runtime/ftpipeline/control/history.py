"""The step history: what each released step read and the watermark it ran with, kept for the oracle.

The oracle (``oracle/``) recomputes a run's output as one batch job; what
it cannot derive from the input alone is what the run decided as it went:
which offsets each step of a Kafka source read (they depend on what had
arrived when the step started) and the watermark each step ran with (it
depends on wall-clock idleness). Both are in the step's record (the step
log, ``store.py``), which checkpoints trim; so each step's record is kept
here as the step is released, on both paths the same way:

- the coordinator sends the record with its ``release`` call
  (``coordinator/release.py``); the worker that releases the step appends
  it to its own file, ``<checkpoint storage>/<pipeline>/history/<worker>.jsonl`` (the
  coordinator never opens pipeline storage: on Kubernetes it runs in the
  operator). One file per worker: no two processes append to one file.
  An object store has no append: there each record is an object of its
  own, ``history/<worker>/<step>.json``.
- a release asked again (of another worker, after a failure) appends the
  same record again; a step replayed after a rollback runs with its recorded
  offsets and watermark, so every line of a step says the same thing.
- a fresh run starts the directory empty (``barrier/existing.py``); a
  resumed one appends.

A line is ``{"step", "offsets": {"<stage>.<channel>": [lo, hi]}, "watermark"?}``.
The history grows by a line a step, as a log does: about 100 bytes per step
and source channel.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ftpipeline.lineage.stepclock import StepClock
from ftpipeline.objectstore.base import ObjectStore, join, open_store
from ftpipeline.objectstore.config import S3Config
from ftpipeline.spec.model import PipelineSpec


def history_store(spec: PipelineSpec, config: S3Config | None = None) -> ObjectStore:
    """Beside the pipeline's checkpoints (``checkpoint/storage.py``), which only its own pods reach."""
    return open_store(join(spec.checkpoint_root, spec.store_key, "history"), config)


def remember(store: ObjectStore, worker: str, record: str) -> None:
    """Keep a released step's record (``StepRecord.to_json``): a line of this worker's file in a directory,
    an object of its own in a bucket."""
    doc = json.loads(record)
    line = {"step": doc["step"], "offsets": doc.get("offsets", {}), **StepClock.from_json(doc).to_json()}
    path = store.local_path(f"{worker}.jsonl")
    if path is None:
        store.put(f"{worker}/{int(doc['step']):012d}.json", json.dumps(line).encode())
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as out:
        out.write(json.dumps(line) + "\n")


def _lines(where: ObjectStore | Path) -> Iterator[dict[str, Any]]:
    """The records of a history (every worker's), or of one of its files."""
    if isinstance(where, Path) and where.is_file():
        for line in where.read_text().splitlines():
            if line.strip():
                yield json.loads(line)
        return
    store = open_store(where) if isinstance(where, Path) else where
    for key in store.list():
        if key.endswith(".jsonl") or key.endswith(".json"):
            for line in store.get(key).decode().splitlines():
                if line.strip():
                    yield json.loads(line)


def read(store: ObjectStore | Path) -> dict[int, dict[str, tuple[int, int]]]:
    """step -> source channel -> its offsets [lo, hi)."""
    steps: dict[int, dict[str, tuple[int, int]]] = {}
    for doc in _lines(store):
        steps[int(doc["step"])] = {k: (int(v[0]), int(v[1])) for k, v in doc["offsets"].items()}
    return steps


def clocks(store: ObjectStore | Path) -> dict[int, StepClock]:
    """step -> the clock it ran with: its watermark, processing time, lookup tables' versions (``StepClock``)."""
    return {int(doc["step"]): StepClock.from_json(doc) for doc in _lines(store)}
