"""A Kafka topic as a replayable source: partitions are slots, Kafka's offsets are the offsets.

Why it reads this way: a step's ranges are recorded before anything reads
them, and a replay, perhaps in another process after a failure, must read
the same records. So the reader never subscribes, joins a group or commits:
it assigns one partition at a recorded offset and reads up to (not
including) the recorded end, with ``isolation.level=read_committed``. The
records of aborted transactions and the transaction markers take offsets
but are never returned, so a range may hold fewer records than offsets;
the same range always holds the same ones, and ends are planned at or below
the last stable offset, where no transaction is still open.

* ``slots(channel)``: the topic's partitions p with p mod parallelism equal
  to the channel, listed again every few seconds, so partitions added while
  the pipeline runs are read from their first offset at a step boundary.
* ``first_offset``: a fresh run's ``startingOffsets`` (earliest, latest, or
  the first offset at a timestamp); a partition that appears later starts
  at its earliest offset, as Spark reads a new partition.
* ``endingOffsets: latest``: the first time a partition is looked at, its
  last stable offset is taken as its end; the source is exhausted once every
  partition is read to its end (Spark's ``availableNow``).
* A range that is gone (deleted by retention before a replay read it) is an
  error naming the topic, partition and offsets, never a silent skip. A broker
  out of reach is waited for: a read, up to ``READ_TIMEOUT_S`` (below the
  coordinator's stall timeout), with a log line every ``WAIT_LOG_S``; a look
  for a report fails after ``LOOK_TIMEOUT_S``, and the worker looks again.

Format ``json``: each value a JSON object, read into the schema's columns as
a JSON Lines file is (``files.json_row``); any other value is a dead letter
located ``<topic>/<partition>@<offset>``. Format ``raw``: Spark's columns,
``key`` and ``value`` as bytes, ``topic``, ``partition``, ``offset`` and
``timestamp`` (milliseconds).
"""

from __future__ import annotations

import logging
import time
from typing import Any

import pyarrow as pa
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from ftpipeline.dataflow.sources.base import DeadLetter, SourceBatch
from ftpipeline.dataflow.sources.files import ARROW_TYPES, BadRecord, json_row
from ftpipeline.dataflow.sources.jsonblock import BlockReader, parse_block
from ftpipeline.kafka.client import describe, reader_config
from ftpipeline.lineage.naming import slot_channel
from ftpipeline.spec.model import KafkaSource

log = logging.getLogger("ftpipeline.kafka")

RAW_SCHEMA = pa.schema([("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()),
                        ("partition", pa.int64()), ("offset", pa.int64()), ("timestamp", pa.int64())])
LIST_EVERY_S = 5.0   # how often the topic's partitions are listed again
BATCH = 10_000       # records asked of the consumer at a time (at most: what the range still lacks, so a read
                     # that has them all returns at once instead of waiting out CONSUME_WAIT_S for more)
CONSUME_WAIT_S = 0.05  # one ask waits this long at most (a range with transaction markers has fewer records)
LOOK_TIMEOUT_S = 5.0   # a look at partitions and offsets (for a report, which is made again soon) waits this long
READ_TIMEOUT_S = 240.0  # a recorded range is waited for this long (a broker restarting), below the stall timeout
WAIT_LOG_S = 10.0       # while a read waits, a line says so this often


class KafkaSourceError(RuntimeError):
    """The topic cannot be read as recorded (missing, unreachable, a range gone)."""


class KafkaSourceReader:
    def __init__(self, spec: KafkaSource, parallelism: int, bootstrap: str, stamp: str = "") -> None:
        self.spec = spec
        self.parallelism = parallelism
        self.bootstrap = bootstrap
        self.stamp = stamp  # eventTime.recordTimestamp: the column that gets each record's timestamp (ms)
        self._consumer: Consumer | None = None
        self._partitions: list[int] = []
        self._listed_at = float("-inf")
        self._ends: dict[int, int] = {}          # endingOffsets latest: partition -> its end
        self._schema = (RAW_SCHEMA if spec.format == "raw" else
                        pa.schema([pa.field(n, ARROW_TYPES[t]) for n, t in spec.schema]))
        if stamp:
            self._schema = self._schema.append(pa.field(stamp, pa.int64()))
        self._blocks = BlockReader()  # JSON values: Arrow's reader where it is sure (jsonblock.py)

    # -- the cluster -----------------------------------------------------------

    @property
    def consumer(self) -> Consumer:
        if self._consumer is None:
            self._consumer = Consumer(reader_config(self.bootstrap))
        return self._consumer

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    def partitions(self) -> list[int]:
        """The topic's partitions, listed again at most every ``LIST_EVERY_S``."""
        now = time.monotonic()
        if now - self._listed_at >= LIST_EVERY_S:
            try:
                meta = self.consumer.list_topics(self.spec.topic, timeout=LOOK_TIMEOUT_S).topics[self.spec.topic]
            except KafkaException as exc:
                raise KafkaSourceError(f"topic {self.spec.topic!r}: {describe(exc)}") from None
            if meta.error is not None:
                raise KafkaSourceError(f"topic {self.spec.topic!r}: {meta.error.name()}: {meta.error.str()}")
            self._partitions = sorted(meta.partitions)
            self._listed_at = now
        return self._partitions

    def watermarks(self, partition: int) -> tuple[int, int]:
        """(earliest offset, last stable offset) of a partition."""
        try:
            low, high = self.consumer.get_watermark_offsets(TopicPartition(self.spec.topic, partition),
                                                            timeout=LOOK_TIMEOUT_S, cached=False)
        except KafkaException as exc:
            raise KafkaSourceError(f"{self.spec.topic}/{partition}: {describe(exc)}") from None
        return int(low), int(high)

    def _at_time(self, partition: int, ms: int) -> int:
        try:
            found = self.consumer.offsets_for_times([TopicPartition(self.spec.topic, partition, ms)],
                                                    timeout=LOOK_TIMEOUT_S)
        except KafkaException as exc:
            raise KafkaSourceError(f"{self.spec.topic}/{partition} at {ms} ms: {describe(exc)}") from None
        offset = found[0].offset
        return self.watermarks(partition)[1] if offset < 0 else int(offset)  # none that late: the end

    # -- SourceReader ----------------------------------------------------------

    def slots(self, channel: int) -> list[int]:
        return [p for p in self.partitions() if slot_channel(p, self.parallelism) == channel]

    def first_offset(self, slot: int, fresh: bool) -> int:
        low, high = self.watermarks(slot)
        if not fresh or self.spec.starting == "earliest":
            return low
        if self.spec.starting == "latest":
            return high
        return self._at_time(slot, self.spec.starting_timestamp_ms)

    def available(self, slot: int, start: int) -> int | None:
        end = self.watermarks(slot)[1]
        if self.spec.ending == "latest":
            end = min(end, self._ends.setdefault(slot, end))
        return max(0, end - start)

    def exhausted(self, slot: int, start: int) -> bool:
        if self.spec.ending != "latest":
            return False
        if slot not in self._ends:
            self._ends[slot] = self.watermarks(slot)[1]
        return start >= self._ends[slot]

    def empty(self) -> pa.Table:
        return self._schema.empty_table()

    def read(self, slot: int, step: int, lo: int, hi: int) -> SourceBatch:
        """The committed records of partition ``slot`` at offsets ``[lo, hi)``."""
        if not 0 <= lo <= hi:
            raise ValueError(f"bad offset range [{lo}, {hi})")
        if lo == hi:
            return SourceBatch(self.empty())
        records = self.fetch(slot, lo, hi)
        if self.spec.format == "raw":
            table = self._raw(records)
            return SourceBatch(table.append_column(self.stamp, table.column("timestamp")) if self.stamp else table)
        return self._json(slot, records)

    def fetch(self, partition: int, lo: int, hi: int) -> list[Any]:
        where = f"{self.spec.topic}/{partition} offsets [{lo}, {hi})"
        consumer = self.consumer
        tp = TopicPartition(self.spec.topic, partition, lo)
        consumer.assign([tp])
        records: list[Any] = []
        reached = lo   # every offset below this one was seen: a record, or skipped by the broker
        started = time.monotonic()
        said = started
        try:
            while reached < hi:
                for message in consumer.consume(min(BATCH, hi - reached), timeout=CONSUME_WAIT_S):
                    error, offset = message.error(), message.offset() or 0
                    if error is None:
                        if offset < hi:
                            records.append(message)
                        reached = max(reached, offset + 1)
                    elif error.code() == KafkaError._PARTITION_EOF:  # at the last stable offset
                        reached = max(reached, offset)
                    elif error.code() in (KafkaError.OFFSET_OUT_OF_RANGE, KafkaError._AUTO_OFFSET_RESET):
                        low, _ = self.watermarks(partition)
                        raise KafkaSourceError(f"{where}: no longer in the topic (it begins at {low} now: "
                                               f"retention removed records a replay needs)")
                    else:
                        raise KafkaSourceError(f"{where}: {error.name()}: {error.str()}")
                now = time.monotonic()
                if reached < hi and now - started > READ_TIMEOUT_S:
                    raise KafkaSourceError(f"{where}: read only up to {reached} in {READ_TIMEOUT_S:.0f}s")
                if reached < hi and now - said > WAIT_LOG_S:
                    said = now
                    log.warning("waiting for Kafka to serve a recorded range",
                                extra={"range": where, "read_up_to": reached, "seconds": round(now - started)})
            return records
        except KafkaException as exc:
            raise KafkaSourceError(f"{where}: {describe(exc)}") from None
        finally:
            consumer.unassign()

    def _raw(self, records: list[Any]) -> pa.Table:
        return pa.table({
            "key": pa.array([m.key() for m in records], pa.binary()),
            "value": pa.array([m.value() for m in records], pa.binary()),
            "topic": pa.array([m.topic() for m in records], pa.string()),
            "partition": pa.array([m.partition() for m in records], pa.int64()),
            "offset": pa.array([m.offset() for m in records], pa.int64()),
            "timestamp": pa.array([m.timestamp()[1] for m in records], pa.int64()),
        }, schema=RAW_SCHEMA)

    def _json(self, partition: int, records: list[Any]) -> SourceBatch:
        """The records' values as rows (Arrow's reader a block at a time where it is sure, ``jsonblock.py``)."""
        values = [m.value() or b"" for m in records]
        dead: list[DeadLetter] = []
        fields = self._schema.remove(len(self._schema) - 1) if self.stamp else self._schema

        def block(i: int, j: int) -> pa.Table | None:
            table = parse_block(b"\n".join(values[i:j]), j - i, fields)
            if table is not None and self.stamp:
                table = table.append_column(self.stamp, pa.array([m.timestamp()[1] for m in records[i:j]], pa.int64()))
            return table

        def one_by_one(i: int, j: int) -> pa.Table:
            columns: list[list[Any]] = [[] for _ in self._schema]
            for m, raw in zip(records[i:j], values[i:j]):
                try:
                    row = json_row(raw, self.spec.schema)
                except BadRecord as bad:
                    text = raw.decode("utf-8", errors="replace")
                    dead.append(DeadLetter(text, str(bad), f"{self.spec.topic}/{partition}@{m.offset()}"))
                    continue
                if self.stamp:
                    row = [*row, m.timestamp()[1]]
                for column, value in zip(columns, row):
                    column.append(value)
            arrays = [pa.array(column, type=f.type) for column, f in zip(columns, self._schema)]
            return pa.Table.from_arrays(arrays, schema=self._schema)

        return SourceBatch(self._blocks.read(len(records), block, one_by_one), dead)
