"""The dead-letter output: malformed records are kept, not dropped, and counted.

Files are named by ``(stage, step, channel)`` and written whole (one object,
``objectstore/``: a local file renamed into place, or a PUT to a bucket), so a
replayed step rewrites the same file with the same records: the dead-letter
output is exactly-once by construction, without going through the barrier.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from ftpipeline.dataflow.sources.base import DeadLetter
from ftpipeline.objectstore.base import ObjectStore
from ftpipeline.spec.model import PipelineSpec


def default_dead_letter_root(spec: PipelineSpec) -> Path | str:
    """``spec.deadLetter.path`` (a directory or an ``s3://`` URI), or ``<name>-dead-letter`` beside the pipeline
    file."""
    return spec.dead_letter or (spec.base_dir / f"{spec.name}-dead-letter")


def dead_letter_key(stage: str, step: int, channel: int) -> str:
    return f"{stage}/step={step}/part-{channel:05d}.jsonl"


def write_dead_letters(store: ObjectStore, stage: str, step: int, channel: int,
                       records: Sequence[DeadLetter]) -> str | None:
    """The step's dead letters of one channel as one file (its key), or None when there are none."""
    if not records:
        return None
    key = dead_letter_key(stage, step, channel)
    store.put(key, "".join(json.dumps({"stage": stage, "step": step, "reason": r.reason, "location": r.location,
                                       "record": r.record}) + "\n" for r in records).encode())
    return key
