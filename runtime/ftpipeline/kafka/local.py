"""Kafka for ``ftpipeline run``: a private broker, the pipeline's topics, a demo's input.

A pipeline that reads or writes Kafka and names no bootstrap servers gets a
broker of its own in the run directory, as it gets a Redis and a ZooKeeper.
A fresh run starts it empty (so a demo run twice gives the same output) and
creates the topics the pipeline names, each with as many partitions as its
stage has channels; ``--produce TOPIC=FILE`` then writes the file's
non-blank lines to the topic as record values. A resumed run keeps the
broker's log: its topics, records and transactions. Which offsets each step
read is in the step history (``control/history.py``), for ``--verify``.
"""

from __future__ import annotations

import dataclasses
import gzip
import shutil
from pathlib import Path

from ftpipeline.embedded.kafka import EmbeddedKafka
from ftpipeline.kafka.topics import create_topics, produce
from ftpipeline.spec.model import PipelineSpec


def topics_of(spec: PipelineSpec) -> dict[str, int]:
    """Every topic the pipeline names, with the partitions a private broker gives it: its stage's channels."""
    out: dict[str, int] = {}
    for stage in spec.stages:
        topic = stage.kafka.topic if stage.kafka else stage.kafka_sink.topic if stage.kafka_sink else None
        if topic is not None:
            out[topic] = max(out.get(topic, 1), stage.parallelism)
        if stage.late_topic is not None:
            out[stage.late_topic] = max(out.get(stage.late_topic, 1), stage.parallelism)
        if stage.table_topic is not None:
            out.setdefault(stage.table_topic.topic, 1)
    return out


def tables_of(spec: PipelineSpec) -> set[str]:
    """The topics lookup stages join as tables: a private broker compacts them."""
    return {s.table_topic.topic for s in spec.stages if s.table_topic is not None}


def start_private(spec: PipelineSpec, directory: Path, fresh: bool) -> EmbeddedKafka:
    """The run directory's broker: emptied first on a fresh run, serving when this returns."""
    if fresh and directory.exists():
        shutil.rmtree(directory)
    broker = EmbeddedKafka(directory).start()
    create_topics(broker.bootstrap, topics_of(spec), tables_of(spec))
    return broker


def needs_private(spec: PipelineSpec) -> bool:
    """It reads or writes Kafka and names no cluster."""
    return spec.uses_kafka and not spec.kafka_bootstrap


def with_private(spec: PipelineSpec, directory: Path, fresh: bool) -> tuple[PipelineSpec, EmbeddedKafka | None]:
    """The spec with a cluster to use: when it reads or writes Kafka and names none, the run directory's broker
    (``start_private``), which the caller stops."""
    if not needs_private(spec):
        return spec, None
    broker = start_private(spec, directory, fresh)
    return dataclasses.replace(spec, kafka_bootstrap=broker.bootstrap), broker


def produce_file(bootstrap: str, topic: str, path: Path) -> int:
    """Each non-blank line of ``path`` (gzipped when it ends in .gz) as one record's value; how many."""
    data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    lines = [line.rstrip(b"\r") for line in data.splitlines() if line.strip()]
    return produce(bootstrap, topic, lines)
