"""Topics as the CLI, the oracle and the tests handle them: create, fill, read back committed.

These are the operations around a pipeline, not in it: ``ftpipeline run``
creates a private broker's topics and loads a demo's input; ``--verify`` reads
the output topic the way a downstream consumer would (read_committed, every
partition from its beginning up to its last stable offset, so the read ends
without waiting for more).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from ftpipeline.kafka.client import TIMEOUT_S, config, describe, send
from ftpipeline.obs.errors import redacted
from ftpipeline.spec.model import PipelineSpec
from ftpipeline.spec.problems import Problem


@dataclass(frozen=True)
class Record:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()
    timestamp: int = 0

    def header(self, name: str) -> bytes | None:
        return next((v for k, v in self.headers if k == name), None)


def _headers(raw: Any) -> tuple[tuple[str, bytes], ...]:
    pairs = raw.items() if isinstance(raw, dict) else raw or ()
    return tuple((str(k), v.encode() if isinstance(v, str) else v or b"") for k, v in pairs)


LOOK_S = 10.0  # how long a start-up check waits for the cluster's answer


def topic_problems(spec: PipelineSpec, timeout_s: float = LOOK_S) -> list[Problem]:
    """Each Kafka topic the pipeline reads or writes that the cluster does not have, naming its field: a
    source would wait for ever on a topic that is not there, and a sink's transactions would fail at its
    first release. Checked where the cluster is reachable before anything starts: ``ftpipeline run`` and
    ``validate`` (with ``spec.kafka.bootstrapServers`` set), and each worker at start-up on Kubernetes
    (``worker/exits.py``). A cluster that does not answer is one problem, naming the endpoint."""
    wanted = {f"spec.stages[{i}].{'source.kafka' if s.kafka else 'sink.kafka'}.topic":
              (s.kafka or s.kafka_sink).topic  # type: ignore[union-attr]
              for i, s in enumerate(spec.stages) if s.kafka is not None or s.kafka_sink is not None}
    wanted |= {f"spec.stages[{i}].{s.late_field}.topic": s.late_topic
               for i, s in enumerate(spec.stages) if s.late_topic is not None}
    wanted |= {f"spec.stages[{i}].lookup.table.kafka.topic": s.table_topic.topic
               for i, s in enumerate(spec.stages) if s.table_topic is not None}
    if not wanted or not spec.kafka_bootstrap:
        return []
    try:
        existing = AdminClient(config(spec.kafka_bootstrap)).list_topics(timeout=timeout_s).topics
    except KafkaException as exc:
        return [Problem("spec.kafka.bootstrapServers",
                        f"{redacted(spec.kafka_bootstrap)} did not answer within {timeout_s:.0f} s: {describe(exc)}")]
    return [Problem(field, f"topic {topic!r} does not exist on {redacted(spec.kafka_bootstrap)}"
                           + (f" (it has: {', '.join(sorted(t for t in existing if not t.startswith('_'))[:10])})"
                              if existing else ""))
            for field, topic in wanted.items() if topic not in existing]


def create_topics(bootstrap: str, partitions: dict[str, int], compacted: Iterable[str] = ()) -> list[str]:
    """Create the topics that do not exist yet (name -> partitions; those ``compacted`` with
    ``cleanup.policy=compact``, as a lookup table's); the names created."""
    admin = AdminClient(config(bootstrap))
    existing = admin.list_topics(timeout=TIMEOUT_S).topics
    compact = set(compacted)
    wanted = [NewTopic(name, n, 1, config={"cleanup.policy": "compact"} if name in compact else {})
              for name, n in partitions.items() if name not in existing]
    if not wanted:
        return []
    for name, future in admin.create_topics(wanted).items():
        try:
            future.result(TIMEOUT_S)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise RuntimeError(f"cannot create topic {name!r}: {describe(exc)}") from None
    return [t.topic for t in wanted]


def produce(bootstrap: str, topic: str, values: Iterable[bytes]) -> int:
    """Write ``values`` to ``topic``, idempotently, waiting until every one is acknowledged."""
    producer = Producer(config(bootstrap, **{"enable.idempotence": True, "linger.ms": 20,
                                             "partitioner": "murmur2_random"}))
    failed: list[str] = []

    def delivered(err: KafkaError | None, _: object) -> None:
        if err is not None:
            failed.append(f"{err.name()}: {err.str()}")

    count = 0
    for value in values:
        send(producer, topic, value, on_delivery=delivered)
        count += 1
    left = producer.flush(TIMEOUT_S)
    if failed or left:
        raise RuntimeError(f"writing to topic {topic!r}: {failed[0] if failed else f'{left} records unacknowledged'}")
    return count


def read_committed(bootstrap: str, topic: str) -> list[Record]:
    """Every committed record of ``topic`` up to each partition's last stable offset now, partition by partition."""
    consumer = Consumer(config(bootstrap, **{"group.id": "ftpipeline-verify", "enable.auto.commit": False,
                                             "isolation.level": "read_committed", "enable.partition.eof": True}))
    try:
        meta = consumer.list_topics(topic, timeout=TIMEOUT_S).topics[topic]
        if meta.error is not None:
            raise RuntimeError(f"topic {topic!r}: {meta.error.str()}")
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=TIMEOUT_S, cached=False)[1]
                for p in meta.partitions}
        pending = {p for p, end in ends.items() if end > 0}
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in sorted(pending)])
        records: list[Record] = []
        idle = 0
        while pending:
            batch = consumer.consume(10_000, timeout=1.0)
            idle = 0 if batch else idle + 1
            if idle > TIMEOUT_S:
                raise RuntimeError(f"topic {topic!r}: partitions {sorted(pending)} not read to their end")
            for m in batch:
                p, offset, error = m.partition() or 0, m.offset() or 0, m.error()
                if error is None:
                    if offset < ends[p]:
                        records.append(Record(p, offset, m.key(), m.value(), _headers(m.headers()), m.timestamp()[1]))
                    if offset + 1 >= ends[p]:
                        pending.discard(p)
                elif error.code() == KafkaError._PARTITION_EOF and offset >= ends[p]:
                    pending.discard(p)
        return records
    finally:
        consumer.close()
