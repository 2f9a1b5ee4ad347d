"""The output barrier for a Kafka topic: each step's rows in transactions committed at its release.

The Parquet barrier's protocol (``bundles.py``) with Kafka doing the atomic
part. Each sink channel has a transactional producer whose
``transactional.id`` is derived from the pipeline's identity, the sink and
the channel, and a consumer group of the same name that holds the channel's
``GT_last``: the group's committed offset on the topic's partition 0 *is*
the last released step, written by ``send_offsets_to_transaction`` inside
the transaction that writes the step's rows. Rows and ``GT_last`` become
visible together or not at all, which is what makes a release idempotent:

    staged   the sink task's part, Arrow IPC in the run's Redis (it outlives
             the worker that wrote it; the executor has no Redis, its
             sidecar stages the file the task left)
    release  for each channel whose GT_last < S: init (once per process:
             fences any older producer of the id, aborting its open
             transaction), begin, produce the part's rows, send offset S to
             the channel's group, commit; then the staged parts are dropped
    replay   a step at or below a channel's GT_last is skipped

A producer remembers the GT_last its own commit wrote and does not read it
again while the steps follow on (a read waits for the last transaction's
markers: ~100 ms). Only a newer producer of the same id can move it, and
that fences this one: a release on a remembered GT_last that fails (fenced,
or the part already dropped by the other releaser) is done once more by a
new producer, whose init fences the other and which reads GT_last. The
channels of a step are released side by side, each in its own transaction.

States of one step of one channel::

    staged --begin, produce, offsets, commit--> released (GT_last = S)
    staged --crash or fence before the commit--> staged   (the open transaction is aborted
                                                          by the next producer's init)
    released --release again (replay)--> released         (skipped)

A commit that Kafka answered only after retrying it across a broker's fault
(it took over ``COMMIT_CHECK_S``) is not taken at its word: a broker killed
while a commit was under way, back 19 s later, answered the retried commit
as done while the group's offset stayed at S-1 for good. GT_last is read
again; when it did not move, the step is finished by the same producer:
the offset alone if the transaction's first record is committed (which a
Redis hash beside the staged parts marks first, so a release elsewhere does
not write the records twice), else the whole part again::

    committed, slow --GT_last read = S--> released
    committed, slow --GT_last = S-1, its first record committed--> marked in --offset alone--> released
    committed, slow --GT_last = S-1, no record committed--> staged --release again--> released

One release of a channel runs at a time in a worker: a call the coordinator
gave up on that still runs (a broker gone mid-commit) holds the channel
until it ends, and a second waits for it rather than use its producer; one
stuck in the Kafka client for good is abandoned to new clients (``turns.py``).

Steps are released in order, so a channel's GT_last is S-1 when S comes.
A worker that the run fenced off but that still runs (a zombie) cannot
commit: whoever released after it initialised the same transactional id,
which bumped the producer epoch, and Kafka refuses the zombie's commit with
``_FENCED`` — the same verdict as ours. Every channel commits a transaction
every step, empty or not, so every channel's GT_last moves with the steps.

Rows are written as JSON objects (their columns; bytes as base64, other
non-JSON values as text), with a header ``ftpipeline-step`` naming the step
that wrote them; the key is one column's value as text, several
as a JSON array, none for no key. Keys are partitioned by murmur2, as the
Java clients (Kafka Streams, Spark) do, so equal keys share a partition.
"""

from __future__ import annotations

import base64
import json
import logging
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow as pa
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from ftpipeline.barrier import jsonrows
from ftpipeline.barrier.turns import Busy, Turns
from ftpipeline.control.store import RunStore
from ftpipeline.kafka.client import TIMEOUT_S, config, describe, reader_config, send, unreachable
from ftpipeline.lineage.naming import store_user
from ftpipeline.obs.crash import CrashPoint
from ftpipeline.spec.model import KafkaSink, PipelineSpec

log = logging.getLogger("ftpipeline.barrier")

# A transaction spans one release (a step's rows of one channel). One its producer left open (a crash, a pause) is
# aborted by the next producer of its id, which every read of GT_last makes first (_Channel.producer), and by the
# broker after this, the longest a reader of the topic waits for it when the run is gone. Longer than a broker's
# restart: a transaction the restarted broker timed out while its commit was being retried raced the retry (with
# 20 s, twice in 18 restarts of ~19 s the commit was answered as done and the group's offset never moved, or
# stayed pending for good).
TRANSACTION_TIMEOUT_MS = 60_000
COORDINATOR_WAIT_S = 30.0  # a new broker's group coordinator takes a moment to load its offsets topic
STEP_HEADER = "ftpipeline-step"  # every record says which step wrote it
STAGE_LIMIT = 512 * 1024 * 1024  # a Redis string's limit: one step's part of one channel must fit
COMMIT_CHECK_S = 2.0  # a commit that took longer was retried across a fault: its GT_last is read again
CONFIRMS = 3          # finishing a step whose commit did not move GT_last, at most this often in one release


class KafkaReleaseError(RuntimeError):
    """A step could not be released to its topic (the cluster, a fence, a part not staged); ``unreachable``
    when the cluster is out of reach and the release may be tried again once it answers."""

    def __init__(self, message: str, unreachable: bool = False) -> None:
        super().__init__(message)
        self.unreachable = unreachable


def write_part(path: Path, tables: Iterator[pa.Table], schema: pa.Schema) -> None:
    """The executor's side: a sink task's part as one compressed Arrow IPC file, for the sidecar to stage."""
    tmp = path.with_name(f".{path.name}.tmp")
    options = pa.ipc.IpcWriteOptions(compression="zstd")
    with pa.OSFile(str(tmp), "wb") as out, pa.ipc.new_stream(out, schema, options=options) as writer:
        for table in tables:
            writer.write_table(table)
    tmp.replace(path)


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    return str(value)


def encode(table: pa.Table, key: tuple[str, ...]) -> Iterator[tuple[bytes | None, bytes]]:
    """The (key, value) records of a part's rows."""
    for batch in table.to_batches(max_chunksize=10_000):
        made = jsonrows.records(batch, key)  # a column at a time where Arrow's text is json.dumps's
        if made is not None:
            yield from made
            continue
        for row in batch.to_pylist():
            value = json.dumps(row, separators=(",", ":"), default=_json_default).encode()
            if not key:
                yield None, value
            elif len(key) == 1:
                k = row.get(key[0])
                yield (None if k is None else (k if isinstance(k, str) else json.dumps(k, default=_json_default))
                       .encode()), value
            else:
                yield json.dumps([row.get(c) for c in key], separators=(",", ":"), default=_json_default).encode(), value


class _Stale(Exception):
    """A release on the GT_last a producer remembered failed: another producer may have released since."""


class _Channel:
    """One sink channel's consumer group, which holds its GT_last, and its transactional producer (made before
    GT_last is first read: its init fences an older producer of the id and aborts what that left open, which a
    read would otherwise wait for)."""

    def __init__(self, bootstrap: str, name: str, topic: str) -> None:
        self.bootstrap, self.name, self.topic = bootstrap, name, topic
        self.group = Consumer(config(bootstrap, **{"group.id": name, "enable.auto.commit": False,
                                                   "isolation.level": "read_committed"}))
        self._producer: Producer | None = None
        self._known: int | None = None  # GT_last as this producer's own last commit left it
        self._step = 0
        self.first: tuple[int, int] | None = None  # the last transaction's first record: (partition, offset)
        self.took = 0.0  # how long the last commit took

    def released(self) -> tuple[int, bool]:
        """GT_last, and whether it was read from the group now. After this producer's own commit it is
        known without asking: another producer can move it only by first fencing this one, which then
        commits nothing. (Reading it costs a round trip, often ~100 ms: the broker answers that the offsets
        are unstable until the last transaction's markers are written, and the client asks again.)"""
        if self._known is None:
            return self.gt_last(), True
        return self._known, False

    @property
    def producer(self) -> Producer:
        if self._producer is None:
            producer = Producer(config(self.bootstrap, **{
                "transactional.id": self.name, "enable.idempotence": True, "partitioner": "murmur2_random",
                "linger.ms": 5, "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS}))
            producer.init_transactions(TIMEOUT_S)  # fences every older producer of this id
            self._producer = producer
        return self._producer

    def gt_last(self) -> int:
        """The channel's released step: its group's committed offset. A group coordinator that is not ready
        (a new broker loading its offsets topic, a moved coordinator) is asked again for up to
        ``COORDINATOR_WAIT_S``; a longer outage is the caller's to wait out."""
        deadline = time.monotonic() + COORDINATOR_WAIT_S
        while True:
            try:
                answer = self.group.committed([TopicPartition(self.topic, 0)], timeout=TIMEOUT_S)[0]
                if answer.error is not None:  # the partition's own error: its offset says nothing, never 0
                    raise KafkaException(answer.error)
                return max(0, int(answer.offset))
            except KafkaException as exc:
                if not unreachable(exc) or time.monotonic() > deadline:
                    raise
                log.info("waiting for the group coordinator", extra={"group": self.name, "error": describe(exc)})
                time.sleep(0.2)

    def begin(self, step: int, table: pa.Table, key: tuple[str, ...]) -> int:
        producer = self.producer
        self._known, self._step, self.first = None, step, None  # unknown until the commit answers
        producer.begin_transaction()
        rows = 0
        headers: list[tuple[str, str | bytes | None]] = [(STEP_HEADER, str(step).encode())]

        def delivered(error: KafkaError | None, message: Message) -> None:
            if error is None:
                self.first = (int(message.partition() or 0), int(message.offset() or 0))

        for k, v in encode(table, key):
            send(producer, self.topic, v, k, headers=headers, **({} if rows else {"on_delivery": delivered}))
            rows += 1
        producer.send_offsets_to_transaction([TopicPartition(self.topic, 0, step)],
                                             self.group.consumer_group_metadata(), TIMEOUT_S)
        return rows

    def commit(self) -> None:
        started = time.monotonic()
        self.producer.commit_transaction(TIMEOUT_S)  # flushes first: the first record's delivery is known
        self.took = time.monotonic() - started
        self._known = self._step

    def visible(self) -> bool:
        """Whether the last transaction's first record is committed: a read_committed reader at its offset
        gets it, or skips it (aborted) to a later one or the partition's end."""
        assert self.first is not None
        partition, offset = self.first
        reader = Consumer(reader_config(self.bootstrap))
        try:
            reader.assign([TopicPartition(self.topic, partition, offset)])
            deadline = time.monotonic() + TIMEOUT_S
            while time.monotonic() < deadline:
                message = reader.poll(0.5)
                if message is None:
                    continue
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        return False
                    raise KafkaException(error)
                return int(message.offset() or 0) == offset
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, f"reading {self.topic}/{partition} at {offset}"))
        finally:
            reader.close()

    def abort(self) -> None:
        self._known = None
        if self._producer is None:
            return
        try:
            self._producer.abort_transaction(TIMEOUT_S)
        except KafkaException:
            pass  # a fenced or broken producer is dropped anyway

    def close(self) -> None:
        self.group.close()
        if self._producer is not None:
            try:
                self._producer.flush(0)
            except KafkaException:
                pass  # a fenced producer has nothing left to send


class KafkaBarrier:
    """The barrier of one Kafka sink, as one worker's sidecar holds it (producers are kept between steps)."""

    def __init__(self, name: str, sink: KafkaSink, channels: int, spec: PipelineSpec, store: RunStore | None,
                 crash: CrashPoint | None = None) -> None:
        self.name, self.sink, self.channels, self.store = name, sink, channels, store
        self.crash = crash  # tests: exit between a transaction's records and its commit (obs/crash.py)
        self.bootstrap = spec.kafka_bootstrap
        self.prefix = f"{store_user(spec.store_key)}-{name}"  # the name Redis and ZooKeeper know the pipeline by
        self._channels: dict[int, _Channel] = {}
        # one release of a channel at a time; one that held it past any call's deadline is stuck (turns.py)
        self._turns = Turns(wait_s=TIMEOUT_S, stuck_s=2 * TIMEOUT_S)

    def channel_id(self, channel: int) -> str:
        """The transactional id and group id of a sink channel."""
        return f"{self.prefix}-{channel}"

    def _channel(self, channel: int) -> _Channel:
        found = self._channels.get(channel)
        if found is None:
            try:
                found = _Channel(self.bootstrap, self.channel_id(channel), self.sink.topic)
            except KafkaException as exc:
                raise KafkaReleaseError(f"sink {self.name}: producer {self.channel_id(channel)}: "
                                        f"{describe(exc)}", unreachable(exc)) from None
            self._channels[channel] = found
        return found

    def _fenced(self, channel: int) -> _Channel:
        state = self._channel(channel)
        state.producer  # a producer this worker's releases will use anyway
        return state

    def _drop(self, channel: int, held: _Channel | None = None) -> None:
        """Close ``channel``'s clients (only if they are still ``held``, when given: a release that ended late
        leaves a newer one alone)."""
        if held is not None and self._channels.get(channel) is not held:
            return
        found = self._channels.pop(channel, None)
        if found is not None:
            found.close()

    def close(self) -> None:
        for channel in list(self._channels):
            self._drop(channel)

    # -- staging (the sidecar, when a sink task completes) ----------------------

    @property
    def _staging(self) -> str:
        """The sink's staged parts: one Redis hash, field ``<step>:<channel>``."""
        assert self.store is not None
        return self.store.k(f"staged:{self.name}")

    def stage(self, step: int, channel: int, path: Path) -> None:
        """Keep the part a sink task wrote (the executor checked its size) until its step is released."""
        assert self.store is not None
        self.store.r.hset(self._staging, f"{step}:{channel}", path.read_bytes())

    def _staged(self, step: int, channel: int) -> pa.Table:
        assert self.store is not None
        data = self.store.r.hget(self._staging, f"{step}:{channel}")
        if data is None:
            raise KafkaReleaseError(f"barrier: step {step} of sink {self.name} has no part staged for channel "
                                    f"{channel}")
        return pa.ipc.open_stream(pa.py_buffer(data)).read_all()

    def _drop_staged(self, up_to: int) -> None:
        """Parts of steps at or below ``up_to``: released, or staged again by a replay of a step already
        released (a rollback re-runs the steps after its cut), which no release will take."""
        assert self.store is not None
        keys = (self._staging, self._in)
        with self.store.r.pipeline(transaction=False) as read:  # both hashes in one round trip, every release
            for key in keys:
                read.hkeys(key)
            listed = read.execute()
        for key, fields in zip(keys, listed):
            old = [f for f in (f.decode() if isinstance(f, bytes) else str(f) for f in fields)
                   if int(f.split(":")[0]) <= up_to]
            if old:
                self.store.r.hdel(key, *old)

    # -- the barrier --------------------------------------------------------------

    def _released(self) -> list[int]:
        """Each channel's released step."""
        try:
            return [self._fenced(c).gt_last() for c in range(self.channels)]
        except KafkaException as exc:
            raise KafkaReleaseError(f"sink {self.name}: reading its released steps: {describe(exc)}",
                                    unreachable(exc)) from None

    def gt_last(self) -> int:
        """The newest step every channel released."""
        return min(self._released())

    def release(self, step: int, channels: int) -> bool:
        """Release ``step`` on every channel that has not yet; False when every one had (idempotent). The
        channels' transactions are independent, so they are released side by side (each waits on the
        broker, not on Python)."""
        if channels == 1:
            released = self.release_channel(step, 0)
        else:
            with ThreadPoolExecutor(min(channels, 8), thread_name_prefix=f"release-{self.name}") as pool:
                released = any(list(pool.map(lambda c: self.release_channel(step, c), range(channels))))
        self._drop_staged(step)
        return released

    def release_channel(self, step: int, channel: int) -> bool:
        try:
            turn = self._turns.take(channel)
        except Busy as exc:
            # not an outage to wait out here: the coordinator asks another worker, whose producer fences this one's
            raise KafkaReleaseError(f"sink {self.name}: a release of channel {channel} is still under way in this "
                                    f"worker (its cluster did not answer it; {exc})") from None
        try:
            if turn.took_over is not None:
                log.warning("a release stuck in the Kafka client is abandoned: the channel gets a new producer, "
                            "which fences the stuck one", extra={"sink": self.name, "channel": channel, "step": step,
                                                                "stuck_s": round(turn.since - turn.took_over.since)})
                self._channels.pop(channel, None)  # not closed: the stuck thread is still in one of its calls
            try:
                return self._release_channel(step, channel)
            except _Stale:  # another releaser moved GT_last since this producer's own commit: a new one reads it
                if turn.void:  # abandoned meanwhile: the channel's clients are the new turn's
                    raise KafkaReleaseError(f"sink {self.name}: a release of channel {channel} was abandoned "
                                            f"stuck in the Kafka client") from None
                self._drop(channel)
                return self._release_channel(step, channel)
        finally:
            self._turns.give_back(turn)

    # -- a commit Kafka answered late -----------------------------------------------

    @property
    def _in(self) -> str:
        """The steps whose records a commit put in without moving GT_last (``_confirm``): field ``<step>:<channel>``."""
        assert self.store is not None
        return self.store.k(f"records-in:{self.name}")

    def _marked_in(self, step: int, channel: int) -> bool:
        assert self.store is not None
        return bool(self.store.r.hexists(self._in, f"{step}:{channel}"))

    def _confirm(self, state: _Channel, step: int, channel: int) -> None:
        """After a slow commit: GT_last read again, and the step finished while it did not move (the module's
        docstring)."""
        assert self.store is not None
        for _ in range(CONFIRMS):
            done = state.gt_last()
            if done >= step:
                state._known = done
                return
            records_in = state.first is not None and state.visible()
            if records_in:
                self.store.r.hset(self._in, f"{step}:{channel}", b"1")
            log.warning("a commit answered as done did not move the released step: finishing it",
                        extra={"sink": self.name, "step": step, "channel": channel, "released": done,
                               "commit_seconds": round(state.took, 3), "records_in": records_in})
            part = self._staged(step, channel)
            state.begin(step, part.slice(0, 0) if self._marked_in(step, channel) else part, self.sink.key)
            state.commit()
        raise KafkaReleaseError(f"sink {self.name}: step {step} of channel {channel} was committed {CONFIRMS} "
                                f"times and its released step did not move", unreachable=True)

    def _release_channel(self, step: int, channel: int) -> bool:
        state = self._channel(channel)
        fresh = True
        try:
            state.producer  # initialised first: another producer's open transaction is aborted, so GT_last is stable
            done, fresh = state.released()
            if not fresh and done != step - 1:  # others released since this producer did (and fenced it)
                raise _Stale()
            if done >= step:
                return False
            if done != step - 1:
                raise KafkaReleaseError(f"barrier: cannot release step {step} of sink {self.name} channel "
                                        f"{channel} before step {done + 1}")
            part = self._staged(step, channel)
            if fresh and self._marked_in(step, channel):  # its records are in, its GT_last is not (_confirm)
                part = part.slice(0, 0)
            rows = state.begin(step, part, self.sink.key)
            if self.crash is not None:
                state.producer.flush(TIMEOUT_S)  # the records are on the broker, in an open transaction
                self.crash.after("kafka-produced")
            state.commit()
            if state.took > COMMIT_CHECK_S:
                self._confirm(state, step, channel)
        except KafkaException as exc:
            state.abort()
            self._drop(channel, state)  # fenced, or in a state only a new producer leaves
            if not fresh:
                raise _Stale() from None
            log.warning("release failed", extra={"sink": self.name, "step": step, "channel": channel,
                                                 "error": describe(exc)})
            raise KafkaReleaseError(f"sink {self.name}: releasing step {step} of channel {channel}: "
                                    f"{describe(exc)}", unreachable(exc)) from None
        except KafkaReleaseError:
            state.abort()
            if not fresh:  # its part already dropped by the releaser that fenced this producer
                raise _Stale() from None
            raise
        log.debug("released", extra={"sink": self.name, "step": step, "channel": channel, "rows": rows})
        return True

    # -- a fresh run (barrier/existing.py) ------------------------------------------

    def problem(self) -> str | None:
        """Why this sink cannot take a fresh run's output as it is, or None."""
        admin = AdminClient(config(self.bootstrap))
        topics = admin.list_topics(timeout=TIMEOUT_S).topics
        if self.sink.topic not in topics:
            return f"topic {self.sink.topic!r} does not exist"
        return None

    def newest(self) -> int:
        """The newest step any channel released (an earlier run's output, when a fresh run looks)."""
        return max(self._released())

    def reset(self) -> None:
        """Forget the released steps (``overwrite``): the records stay in the topic, Kafka keeps them."""
        self.close()
        admin = AdminClient(config(self.bootstrap))
        groups = [self.channel_id(c) for c in range(self.channels)]
        for group, future in admin.delete_consumer_groups(groups, request_timeout=TIMEOUT_S).items():
            try:
                future.result(TIMEOUT_S)
            except KafkaException as exc:
                if "GROUP_ID_NOT_FOUND" not in describe(exc):
                    raise KafkaReleaseError(f"sink {self.name}: resetting {group}: {describe(exc)}") from None
