"""Late records to a Kafka topic (``lateData.topic``), exactly once, through the Kafka barrier.

A stage's late records are a second output of its tasks, decided by the
step's recorded watermark alone, so a replayed step finds the same ones.
Written straight to a topic they would be duplicated by every replay; so
they take the sinks' road (``kafka.py``): the task leaves its late rows in
a file, its sidecar stages them in the run's Redis, and the release of the
step produces them in one transaction that also moves the output's
``GT_last`` for them. What differs from a Kafka sink:

- **One transactional channel for the stage**, not one per stage channel:
  the release gathers the step's late rows of every channel into one
  transaction. Which channel finds a late record depends on the stage's
  parallelism, the record does not: a rescale changes nothing here.
- **Parts are staged only when a channel has late rows**, named by the
  parallelism that found them (``<step>:<channel>:<parallelism>``). A step
  staged once more after a rollback and a rescale may leave parts of the
  old parallelism behind: the release takes only the current one's. A
  channel with nothing staged had no late rows in that step.
- **A fresh run starts the topic's released steps afresh** unless a sink
  resumes (``existing.py``): the records an earlier run wrote stay in the
  topic, as Kafka keeps them.

States of one step: the same as a sink channel's (``kafka.py``):
``staged --commit--> released``; a crash before the commit leaves it
staged and its open transaction is aborted by the next producer.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from ftpipeline.barrier.kafka import KafkaBarrier
from ftpipeline.control.store import RunStore
from ftpipeline.obs.crash import CrashPoint
from ftpipeline.spec.model import KafkaSink, PipelineSpec, StageSpec


def late_output(stage: str) -> str:
    """The name a stage's late-data topic goes by in the barrier (a stage name has no dot)."""
    return f"{stage}.late"


def late_keys(stage: StageSpec) -> tuple[str, ...]:
    """The record key of a late record: the stage's keys, so a key's late records share a partition."""
    if stage.deduplicate is not None:
        return stage.deduplicate.keys
    if stage.join is not None:
        return stage.join.keys
    return stage.aggregate.key_by if stage.aggregate is not None else ()


class LateTopicBarrier(KafkaBarrier):
    """The late records of one stage, released to ``lateData.topic`` with the steps."""

    def __init__(self, stage: StageSpec, spec: PipelineSpec, store: RunStore | None,
                 crash: CrashPoint | None = None) -> None:
        assert stage.late_topic is not None
        super().__init__(late_output(stage.name), KafkaSink(stage.late_topic, late_keys(stage)), 1, spec, store,
                         crash)
        self.parallelism = stage.parallelism

    def stage(self, step: int, channel: int, path: Path) -> None:
        assert self.store is not None
        self.store.r.hset(self._staging, f"{step}:{channel}:{self.parallelism}", path.read_bytes())

    def _staged(self, step: int, channel: int) -> pa.Table:
        """Every stage channel's late rows of ``step`` (of the current parallelism), in channel order."""
        assert self.store is not None
        parts: list[tuple[int, bytes]] = []
        for field, data in self.store.r.hgetall(self._staging).items():
            at, ch, p = (field.decode() if isinstance(field, bytes) else str(field)).split(":")
            if int(at) == step and int(p) == self.parallelism:
                assert isinstance(data, bytes)
                parts.append((int(ch), data))
        tables = [pa.ipc.open_stream(pa.py_buffer(data)).read_all() for _, data in sorted(parts)]
        return pa.concat_tables(tables, promote_options="permissive") if tables else pa.table({})
