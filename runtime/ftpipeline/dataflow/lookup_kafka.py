"""A compacted Kafka topic as a lookup stage's table: its version, and a worker's copy of it.

A topic with ``cleanup.policy=compact`` is how a Kafka shop keeps a table
(customers, prices, rules): each record's key is a row's identity, its value
the row, a null value (a tombstone) deletes it. Joined like a Delta table
(``lookup.py``), it needs a version a step can record and a replay can read
again. Its version is the end (last stable offset) of each partition when the
step starts: the table is then the last value of each key among the records
below those ends, the same whenever it is read.

- **Who looks at the ends.** Not the coordinator: on Kubernetes it runs in
  the operator, which holds no Kafka credentials. The workers that run the
  stage look (``TableEnds``, beside their source reports) and report
  ``{"t": "table", "stage", "ends"}``; the coordinator keeps the largest end
  it heard of each partition (``lookup.TableVersions``) and starts no step
  before every Kafka table was reported once. The version recorded with a
  step reads ``kafka:<partition>=<end>,...``.
- **A worker's copy** (``KafkaTable``): the rows by (partition, key), read
  from the topic's start up to the ends it was last asked for. A newer
  version reads on from there; an older one (a replay of a step behind it)
  reads again from the start. A record whose value is not a row of the
  schema changes nothing and is logged, named ``topic/partition@offset``
  (it stays in the topic); a record without a key is skipped the same way.
- **The limit.** Compaction keeps only each key's last value, so a replay
  of a step far behind reads the topic as compaction has left it: a key
  whose older value was compacted away in favour of one written after the
  step's ends is missing from the replayed table. Flink's and Spark's
  readers of a compacted topic keep no more history than that; a table
  whose history matters is a Delta table.
"""

from __future__ import annotations

import logging

import pyarrow as pa

from ftpipeline.dataflow.sources.files import ARROW_TYPES, BadRecord, Value, json_row
from ftpipeline.dataflow.sources.kafka import KafkaSourceReader
from ftpipeline.spec.model import KafkaSource

log = logging.getLogger("ftpipeline.lookup")

PREFIX = "kafka:"


def version(ends: dict[int, int]) -> str:
    """The version a step records: each partition's end, in partition order."""
    return PREFIX + ",".join(f"{p}={end}" for p, end in sorted(ends.items()))


def ends_of(version: str) -> dict[int, int]:
    if not version.startswith(PREFIX):
        raise ValueError(f"not a Kafka table's version: {version!r}")
    body = version[len(PREFIX):]
    return {int(p): int(end) for p, _, end in (part.partition("=") for part in body.split(",") if part)}


class TableEnds:
    """A worker's look at a table topic's partitions and their ends (for its reports)."""

    def __init__(self, topic: KafkaSource, bootstrap: str) -> None:
        self._reader = KafkaSourceReader(topic, 1, bootstrap)

    def ends(self) -> dict[int, int]:
        return {p: self._reader.watermarks(p)[1] for p in self._reader.partitions()}

    def close(self) -> None:
        self._reader.close()


class KafkaTable:
    """One worker's copy of a table topic, brought to the version a step recorded."""

    def __init__(self, stage: str, topic: KafkaSource, bootstrap: str) -> None:
        self.stage = stage
        self.topic = topic
        self._reader = KafkaSourceReader(topic, 1, bootstrap)
        self._read_to: dict[int, int] = {}                   # partition -> the offset read up to
        self._rows: dict[tuple[int, bytes], list[Value]] = {}
        self._schema = pa.schema([pa.field(n, ARROW_TYPES[t]) for n, t in topic.schema])

    def at(self, ends: dict[int, int]) -> pa.Table:
        if any(ends.get(p, 0) < at for p, at in self._read_to.items()):  # a step behind this copy: from the start
            self._read_to, self._rows = {}, {}
        for partition, end in sorted(ends.items()):
            start = self._read_to.get(partition)
            if start is None:
                start = min(self._reader.watermarks(partition)[0], end)
            if start < end:
                self._apply(partition, start, end)
            self._read_to[partition] = end
        columns = list(zip(*self._rows.values())) or [() for _ in self._schema]
        return pa.Table.from_arrays([pa.array(list(c), type=f.type) for c, f in zip(columns, self._schema)],
                                    schema=self._schema)

    def _apply(self, partition: int, lo: int, hi: int) -> None:
        for message in self._reader.fetch(partition, lo, hi):
            key, value = message.key(), message.value()
            where = f"{self.topic.topic}/{partition}@{message.offset()}"
            if key is None:
                self._skip(where, "a table's record needs a key (its row's identity)")
            elif value is None:
                self._rows.pop((partition, key), None)
            else:
                try:
                    self._rows[(partition, key)] = json_row(value, self.topic.schema)
                except BadRecord as bad:
                    self._skip(where, str(bad))

    def _skip(self, where: str, why: str) -> None:
        log.warning("a lookup table's record is not a row: it changes nothing",
                    extra={"stage": self.stage, "record": where, "error": why})

    def close(self) -> None:
        self._reader.close()
