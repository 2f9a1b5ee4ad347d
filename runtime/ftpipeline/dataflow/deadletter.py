"""The dead-letter output: malformed records are kept, not dropped, and counted.

Files are named by ``(stage, step, channel)`` and written atomically, so a
replayed step rewrites the same file with the same records: the dead-letter
output is exactly-once by construction, without going through the barrier.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

from ftpipeline.dataflow.sources.base import DeadLetter
from ftpipeline.spec.model import PipelineSpec


def default_dead_letter_root(spec: PipelineSpec) -> Path:
    """``spec.deadLetter.path``, or ``<name>-dead-letter`` beside the pipeline file."""
    return spec.dead_letter or (spec.base_dir / f"{spec.name}-dead-letter")


def dead_letter_file(root: Path, stage: str, step: int, channel: int) -> Path:
    return root / stage / f"step={step}" / f"part-{channel:05d}.jsonl"


def write_dead_letters(root: Path, stage: str, step: int, channel: int, records: Sequence[DeadLetter]) -> Path | None:
    if not records:
        return None
    path = dead_letter_file(root, stage, step, channel)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    with open(tmp, "w") as f:
        for r in records:
            f.write(json.dumps({"stage": stage, "step": step, "reason": r.reason, "location": r.location, "record": r.record}) + "\n")
    os.replace(tmp, path)
    return path
