"""Replayable sources: a deterministic generator and a directory of files."""

from __future__ import annotations

from types import ModuleType

from ftpipeline.dataflow.sources.base import DeadLetter, SourceBatch, SourceReader, channel_share
from ftpipeline.spec.model import StageSpec


def make_reader(stage: StageSpec, module: ModuleType | None) -> SourceReader:
    """The reader of a source stage; ``module`` is the entry point (needed to generate rows)."""
    if stage.generator is not None:
        from ftpipeline.dataflow.sources.generator import GeneratorReader

        return GeneratorReader(stage.generator, module)
    if stage.file is not None:
        from ftpipeline.dataflow.sources.files import FileSourceReader

        return FileSourceReader(stage.file, stage.parallelism)
    raise ValueError(f"stage {stage.name!r} is not a source")


def rows_per_step(stage: StageSpec) -> int:
    spec = stage.generator or stage.file
    assert spec is not None
    return spec.rows_per_step


__all__ = ["DeadLetter", "SourceBatch", "SourceReader", "channel_share", "make_reader", "rows_per_step"]
