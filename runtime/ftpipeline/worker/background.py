"""A sidecar's unasked work: reports, garbage collection, and listening for announcements.

The sidecar (``sidecar.py``) answers calls; these two loops run beside its
Flight server for the process's life (``server.py`` starts them):

- ``run``, every 50 ms (every 10 ms with a Kafka source, whose records
  arrive as a stream: a report is a watermark-offset lookup, and a change
  only is sent): re-reads its NTT, reports the records available to its
  source channels (Feldera's ``received(step, n)``) and a recorded but
  uncommitted next step (``replay(step)``), the ends of the compacted
  topics its lookup stages join (``table``, ``dataflow/lookup_kafka.py``)
  every ``TABLE_LOOK_S``, and collects garbage (drops
  consumed objects, in shared mode of the PT lock) every ``gc.intervalMs``;
- ``listen``: wakes the task hand-out whenever another worker announces a
  completion (``LineageTables.announce``), since its outputs may be the
  missing inputs of a task queued here. That is what lets a waiting
  ``next_task`` sleep instead of polling Redis. Redis going away costs only
  the wake-ups until it is back; the hand-out's safety poll carries on.

They read the sidecar's state under its lock where the sidecar itself does;
they are the sidecar's own loops, kept in a file of their own.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

import redis

from ftpipeline.dataflow.lookup_kafka import TableEnds
from ftpipeline.dataflow.sources import SourceReader
from ftpipeline.lineage.naming import Channel, Slot
from ftpipeline.obs.errors import one_line

if TYPE_CHECKING:
    from ftpipeline.worker.sidecar import Sidecar

log = logging.getLogger("ftpipeline.sidecar")

LOOP_S = 0.05            # the loop's period
STREAM_REPORT_S = 0.01   # a Kafka source's new records are reported this often: its step waits for no longer poll
TABLE_LOOK_S = 0.1       # a Kafka lookup table's ends are looked at this often (sent when changed, or each second)


class Background:
    def __init__(self, sidecar: Sidecar) -> None:
        self.s = sidecar
        self._sent: dict[Slot, tuple[Any, ...]] = {}  # the last 'received' report per source slot
        self._unreadable: dict[Channel, str] = {}     # source channels whose reader fails, and why
        self._listed: dict[Channel, tuple[list[int], float]] = {}  # the last 'listed' report per source channel
        self._replayed = 0
        self._tables: dict[str, TableEnds] = {}                 # Kafka lookup stage -> its topic's ends
        self._table_sent: dict[str, tuple[dict[int, int], float]] = {}
        self._table_unreadable: dict[str, str] = {}

    def collect_garbage(self) -> int:
        s = self.s
        dropped = s.tables.collect(s.worker)
        for name in dropped or []:
            s.buffer.drop(name)
        return len(dropped or [])

    def report_sources(self) -> None:
        """Feldera's received(step, n): records available to this worker's source channels."""
        s = self.s
        if s.graph is None:
            return
        readers = s.readers
        owned = [ch for ch in s.owned() if ch.stage in readers]
        if not owned:
            return
        offsets = s.store.next_offsets()
        started = {slot.stage for slot in offsets}  # sources the run has recorded offsets of
        now = time.monotonic()
        for ch in owned:
            try:
                self._report_channel(ch, readers[ch.stage], offsets, ch.stage not in started, now)
            except (OSError, ValueError, RuntimeError) as exc:  # a source out of reach: say so, look again
                said = one_line(exc)
                if self._unreadable.get(ch) != said:
                    self._unreadable[ch] = said
                    log.warning("source unreadable: its records are not reported until it answers",
                                extra={"worker": s.worker, "channel": ch.key(), "error": said})
            else:
                if self._unreadable.pop(ch, None) is not None:
                    log.warning("source readable again", extra={"worker": s.worker, "channel": ch.key()})

    def _report_channel(self, ch: Channel, reader: SourceReader, offsets: dict[Slot, int], fresh: bool,
                        now: float) -> None:
        s = self.s
        found = reader.slots(ch.index)
        last_listed = self._listed.get(ch)
        if last_listed is None or last_listed[0] != found or now - last_listed[1] > 1.0:
            # which slots the channel has, none included: a bounded topic ends only once every channel said
            self._listed[ch] = (found, now)
            s.store.send({"t": "listed", "w": s.worker, "ch": ch.key(), "slots": found})
        for index in found:
            slot = Slot(ch.stage, index)
            start = offsets.get(slot)
            if start is None:  # not read yet: where the source's starting offsets say
                start = reader.first_offset(index, fresh=fresh)
            n = reader.available(index, start)
            report = (start, -1 if n is None else n, reader.exhausted(index, start))
            last = self._sent.get(slot)
            if last is None or last[:3] != report or now - last[3] > 1.0:
                self._sent[slot] = (*report, now)
                s.store.send({"t": "received", "w": s.worker, "step": s.step + 1, "ch": slot.key(),
                              "start": report[0], "n": report[1], "exhausted": report[2]})

    def report_tables(self) -> None:
        """The ends of each compacted topic a lookup stage of this worker joins: the version a step starting
        now records (``lookup.TableVersions``)."""
        s = self.s
        if s.spec is None or s.graph is None:
            return
        tables = [stage for stage in s.spec.lookups if stage.table_topic is not None]
        if not tables:
            return  # nothing to look at: no placement read either
        mine = {ch.stage for ch in s.owned()}
        now = time.monotonic()
        for stage in tables:
            if stage.name not in mine:
                continue
            looker = self._tables.get(stage.name)
            if looker is None:
                assert stage.table_topic is not None
                looker = self._tables[stage.name] = TableEnds(stage.table_topic, s.spec.kafka_bootstrap)
            try:
                ends = looker.ends()
            except (OSError, ValueError, RuntimeError) as exc:  # the cluster out of reach: say so, look again
                said = one_line(exc)
                if self._table_unreadable.get(stage.name) != said:
                    self._table_unreadable[stage.name] = said
                    log.warning("lookup table unreadable: its ends are not reported until it answers",
                                extra={"worker": s.worker, "stage": stage.name, "error": said})
                continue
            self._table_unreadable.pop(stage.name, None)
            last = self._table_sent.get(stage.name)
            if last is None or last[0] != ends or now - last[1] > 1.0:
                self._table_sent[stage.name] = (ends, now)
                s.store.send({"t": "table", "w": s.worker, "stage": stage.name,
                              "ends": {str(p): end for p, end in ends.items()}})

    def close(self) -> None:
        for looker in self._tables.values():
            looker.close()
        self._tables.clear()

    def report_replay(self) -> None:
        """Feldera's replay(step): the step log already holds the next step's offsets.

        That happens when a step was recorded and then the coordinator went away
        before committing it, or after a rollback to a checkpoint: the next step
        must re-run with exactly those offsets, at once.
        """
        s = self.s
        if not s.is_open or self._replayed == s.step + 1:
            return
        if s.store.step(s.step + 1) is not None:
            self._replayed = s.step + 1
            s.store.send({"t": "replay", "w": s.worker, "step": self._replayed})

    def run(self) -> None:
        s = self.s
        next_gc = next_look = next_table = 0.0
        while not s.stopping.is_set():
            if s.fenced is not None and not s.busy:
                log.error("stopping: fenced off", extra={"worker": s.worker, "reason": s.fenced})
                s.refused("it was stopped before it could commit anything", "fenced_stops")
                s.stopping.set()
                break
            now = time.monotonic()
            try:
                s.refresh()
                self.report_sources()
                if now >= next_look:
                    self.report_replay()
                    next_look = now + LOOP_S
                if now >= next_table:
                    self.report_tables()
                    next_table = now + TABLE_LOOK_S
                if s.spec is not None and now >= next_gc:
                    self.collect_garbage()
                    next_gc = now + s.spec.gc_interval_ms / 1000
            except redis.RedisError as exc:
                log.error("redis unavailable", extra={"error": str(exc)})
            time.sleep(STREAM_REPORT_S if s.spec is not None and s.spec.reads_kafka else LOOP_S)
        self.close()

    def listen(self) -> None:
        s = self.s
        while not s.stopping.is_set():
            pubsub = s.r.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call]
            try:
                pubsub.subscribe(s.tables.ready_channel)
                while not s.stopping.is_set():
                    if pubsub.get_message(timeout=1.0) is not None:
                        s.wake_up()
            except redis.RedisError as exc:
                log.warning("announcements unavailable: polling until Redis answers", extra={"error": str(exc)})
                s.stopping.wait(1.0)
            finally:
                pubsub.close()
