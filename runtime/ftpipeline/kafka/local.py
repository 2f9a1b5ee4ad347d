"""Kafka for ``ftpipeline run``: a private broker, the pipeline's topics, a demo's input, the step history.

A pipeline that reads or writes Kafka and names no bootstrap servers gets a
broker of its own in the run directory, as it gets a Redis and a ZooKeeper.
A fresh run starts it empty (so a demo run twice gives the same output) and
creates the topics the pipeline names, each with as many partitions as its
stage has channels; ``--produce TOPIC=FILE`` then writes the file's
non-blank lines to the topic as record values. A resumed run keeps the
broker's log: its topics, records and transactions.

The step history (``steps.jsonl`` in the run directory) is what the oracle
needs of a Kafka source: which offsets each step read. A file source's steps
follow from its ``rowsPerStep``; a topic's depend on what had arrived when
each step started, so the run writes them down as it records them, and
``--verify`` tags each input record with its step from there.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import shutil
from collections.abc import Mapping
from pathlib import Path

from ftpipeline.embedded.kafka import EmbeddedKafka
from ftpipeline.kafka.topics import create_topics, produce
from ftpipeline.spec.model import PipelineSpec

HISTORY = "steps.jsonl"


def topics_of(spec: PipelineSpec) -> dict[str, int]:
    """Every topic the pipeline names, with the partitions a private broker gives it: its stage's channels."""
    out: dict[str, int] = {}
    for stage in spec.stages:
        topic = stage.kafka.topic if stage.kafka else stage.kafka_sink.topic if stage.kafka_sink else None
        if topic is not None:
            out[topic] = max(out.get(topic, 1), stage.parallelism)
        if stage.late_topic is not None:
            out[stage.late_topic] = max(out.get(stage.late_topic, 1), stage.parallelism)
    return out


def start_private(spec: PipelineSpec, directory: Path, fresh: bool) -> EmbeddedKafka:
    """The run directory's broker: emptied first on a fresh run, serving when this returns."""
    if fresh and directory.exists():
        shutil.rmtree(directory)
    broker = EmbeddedKafka(directory).start()
    create_topics(broker.bootstrap, topics_of(spec))
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


class StepHistory:
    """The offsets each step read, appended as steps are recorded (a replay writes its step again, the same)."""

    def __init__(self, path: Path, fresh: bool) -> None:
        self.path = path
        if fresh:
            path.unlink(missing_ok=True)

    def append(self, step: int, offsets: Mapping[str, tuple[int, int]], watermark: int | None = None) -> None:
        doc: dict[str, object] = {"step": step, "offsets": {k: list(v) for k, v in offsets.items()}}
        if watermark is not None:
            doc["watermark"] = watermark
        with self.path.open("a") as out:
            out.write(json.dumps(doc) + "\n")

    @staticmethod
    def read(path: Path) -> dict[int, dict[str, tuple[int, int]]]:
        """step -> slot key -> [lo, hi); the last line of a step wins."""
        steps: dict[int, dict[str, tuple[int, int]]] = {}
        if path.exists():
            for line in path.read_text().splitlines():
                doc = json.loads(line)
                steps[int(doc["step"])] = {k: (int(v[0]), int(v[1])) for k, v in doc["offsets"].items()}
        return steps

    @staticmethod
    def watermarks(path: Path) -> dict[int, int | None]:
        """step -> the watermark it ran with (``eventtime/``); the last line of a step wins."""
        marks: dict[int, int | None] = {}
        if path.exists():
            for line in path.read_text().splitlines():
                doc = json.loads(line)
                marks[int(doc["step"])] = doc.get("watermark")
        return marks
