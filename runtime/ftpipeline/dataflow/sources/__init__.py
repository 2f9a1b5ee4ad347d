"""Replayable sources: a deterministic generator, a directory of files, a Kafka topic."""

from __future__ import annotations

from types import ModuleType

from ftpipeline.dataflow.sources.base import DeadLetter, SourceBatch, SourceReader, channel_share, read_ranges
from ftpipeline.spec.model import StageSpec


def make_reader(stage: StageSpec, module: ModuleType | None, bootstrap: str = "") -> SourceReader:
    """The reader of a source stage; ``module`` is the entry point (needed to generate rows), ``bootstrap``
    the pipeline's Kafka cluster (``spec.kafka_bootstrap``)."""
    if stage.generator is not None:
        from ftpipeline.dataflow.sources.generator import GeneratorReader

        return GeneratorReader(stage.generator, module)
    if stage.file is not None:
        from ftpipeline.dataflow.sources.files import FileSourceReader

        return FileSourceReader(stage.file, stage.parallelism)
    if stage.kafka is not None:
        from ftpipeline.dataflow.sources.kafka import KafkaSourceReader

        stamp = stage.event_time.column if stage.event_time is not None and stage.event_time.record_timestamp else ""
        return KafkaSourceReader(stage.kafka, stage.parallelism, bootstrap, stamp)
    raise ValueError(f"stage {stage.name!r} is not a source")


def rows_per_step(stage: StageSpec) -> int:
    """Rows one step reads of a generator or a directory of files (a Kafka source reads what is there)."""
    spec = stage.generator or stage.file
    assert spec is not None
    return spec.rows_per_step


__all__ = ["DeadLetter", "SourceBatch", "SourceReader", "channel_share", "make_reader", "read_ranges", "rows_per_step"]
