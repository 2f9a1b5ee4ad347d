"""Exactly-once output (FlameStream's barrier): a directory of Parquet step bundles (``bundles.py``; on an
object store, ``objects.py``), a Kafka topic written in transactions (``kafka.py``) or a Delta Lake table
written one commit per step (``delta.py``), behind one protocol."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from ftpipeline.barrier.bundles import Bundle, ParquetBundleSink
from ftpipeline.barrier.objects import ObjectBundleSink
from ftpipeline.objectstore.base import is_remote
from ftpipeline.control.store import RunStore
from ftpipeline.spec.model import PipelineSpec, StageSpec


class Barrier(Protocol):
    """A sink's barrier: ``GT_last``, and an idempotent release of the next step."""

    def gt_last(self) -> int: ...

    def release(self, step: int, channels: int) -> bool: ...


def barrier_of(stage: StageSpec, spec: PipelineSpec, store: RunStore | None = None,
               worker: str | None = None) -> Barrier:
    """The barrier of a sink stage (a Kafka sink stages its parts in ``store``, the run's Redis; ``worker``:
    the sidecar that holds it, which a test may have crash mid-release)."""
    if stage.kafka_sink is not None:
        from ftpipeline.barrier.kafka import KafkaBarrier
        from ftpipeline.obs.crash import CrashPoint

        return KafkaBarrier(stage.name, stage.kafka_sink, stage.parallelism, spec, store, CrashPoint.from_env(worker))
    if stage.delta_sink is not None:
        from ftpipeline.barrier.delta import DeltaBarrier
        from ftpipeline.obs.crash import CrashPoint

        return DeltaBarrier(stage.name, stage.delta_sink, spec, CrashPoint.from_env(worker))
    assert stage.sink is not None
    return parquet_sink(stage.sink.path)


BundleSink = ParquetBundleSink | ObjectBundleSink


def parquet_sink(path: Path | str) -> BundleSink:
    """A Parquet sink's barrier: a directory's steps released by a rename, or an object store's by a commit
    object (``objects.py``)."""
    return ObjectBundleSink(str(path)) if is_remote(path) else ParquetBundleSink(Path(path))


__all__ = ["Barrier", "Bundle", "BundleSink", "ObjectBundleSink", "ParquetBundleSink", "barrier_of", "parquet_sink"]
