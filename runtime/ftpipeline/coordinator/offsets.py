"""Source offsets: what the workers report available, and what the next step reads.

Offsets are kept per source *slot* (``lineage.naming.Slot``): a channel of a
generator or a directory of files, or a Kafka partition. Each worker reports
(``received``) for every slot of the source channels it owns: where the slot
stands (its next offset, or where the source's starting offsets put a slot
not read yet), how many offsets are readable from there, and whether the
input has ended. The coordinator plans the next step from those reports and
records it in the step log and the command log before any task reads, so a
replay reads exactly the same records.

One slot::

    unknown  --first report (start = starting offset)-->  reported
    reported --planned in step S: [start, start + n)-->   recorded (next = start + n)
    recorded --a report from next-->                      reported
    any      --rollback to a checkpoint-->                next = the cut's offset, reports cleared

Generators and files have a fixed slot per channel, and a step waits for
every channel's report (a file channel's count decides the step's rows).
A Kafka source's slots are whatever partitions its readers report: one not
reported from its next offset reads nothing this step but holds no step
back, so a slow or restarting worker does not stop the other partitions, and
a partition added at run time joins at the next step. ``maxRecordsPerStep``
is shared among a topic's partitions in proportion to their backlog, as
Spark's ``maxOffsetsPerTrigger``.

Which partitions a topic has, the coordinator learns from its readers too:
each source channel's worker says which slots it found (``listed``, a
channel with none included). A bounded topic is read to its end only once
every channel has listed its slots and each listed slot is at its end: the
reports alone cannot tell an empty partition reported first from the
whole topic (a run whose first report was of an empty partition ended
before the other worker had looked).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ftpipeline.dataflow.graph import Graph
from ftpipeline.dataflow.sources import channel_share, rows_per_step
from ftpipeline.lineage.naming import Channel, Slot
from ftpipeline.spec.model import StageSpec


@dataclass(frozen=True)
class Report:
    start: int        # the slot's next offset as the worker saw it
    n: int            # offsets readable from start; -1: unbounded (a generator)
    exhausted: bool   # nothing will ever follow start + n


@dataclass
class Plan:
    offsets: dict[Slot, tuple[int, int]] = field(default_factory=dict)
    reported: bool = True     # every slot that must report did, from its next offset
    exhausted: bool = True    # and no source has anything left

    @property
    def rows(self) -> int:
        return sum(hi - lo for lo, hi in self.offsets.values())


def shares(backlog: dict[Slot, int], limit: int) -> dict[Slot, int]:
    """``limit`` offsets shared among slots in proportion to their backlog, the remainder one each to the
    largest backlogs (ties by slot): deterministic for the same reports."""
    total = sum(backlog.values())
    if total <= limit:
        return dict(backlog)
    out = {s: n * limit // total for s, n in backlog.items()}
    left = limit - sum(out.values())
    for s in sorted(backlog, key=lambda s: (-(backlog[s] - out[s]), s)):
        if left == 0:
            break
        if out[s] < backlog[s]:
            out[s] += 1
            left -= 1
    return out


class SourceOffsets:
    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.next: dict[Slot, int] = {}         # slot -> first offset no step has read
        self.reports: dict[Slot, Report] = {}   # slot -> its worker's newest report
        self.listed: dict[Channel, tuple[int, ...]] = {}  # source channel -> the slots its reader found

    def received(self, slot: Slot, start: int, n: int, exhausted: bool) -> None:
        self.reports[slot] = Report(start, n, exhausted)

    def found(self, channel: Channel, slots: list[int]) -> None:
        """A source channel's reader listed these slots (a topic's partitions of the channel; maybe none)."""
        self.listed[channel] = tuple(sorted(slots))

    def _all_listed(self, stage: StageSpec) -> bool:
        return all(Channel(stage.name, i) in self.listed for i in range(stage.parallelism))

    def finished(self) -> set[Channel]:
        """Source channels with nothing more to read, as of the newest reports: each of their slots reported
        from where the next step starts, nothing readable and the input ended (a directory's channel read to
        its end, or with no file; a bounded topic's partitions at their ends), or a topic's channel that listed
        no partition of its own."""
        out = set()
        for stage in self.graph.sources():
            for i in range(stage.parallelism):
                channel = Channel(stage.name, i)
                if stage.kafka is not None:
                    if channel not in self.listed:
                        continue
                    slots = [Slot(stage.name, p) for p in self.listed[channel]]
                elif stage.generator is None:
                    slots = [Slot(stage.name, i)]
                else:
                    continue
                if all(self._ended(s) for s in slots):
                    out.add(channel)
        return out

    def _ended(self, slot: Slot) -> bool:
        seen = self.reports.get(slot)
        return (seen is not None and seen.exhausted and seen.n == 0
                and seen.start == self.next.get(slot, seen.start))

    def recorded(self, offsets: dict[Slot, tuple[int, int]]) -> None:
        """A step with these offsets is in the step log: the next one reads from where they end."""
        for slot, (_, hi) in offsets.items():
            self.next[slot] = hi

    def reset(self, next_offsets: dict[Slot, int]) -> None:
        """Rolled back: the cut's offsets; reports from before are stale."""
        self.next = dict(next_offsets)
        self.reports.clear()

    def lag(self) -> dict[Slot, int]:
        """Offsets reported readable that no step has read yet, per slot of a bounded count (a topic's
        consumer lag, as of its workers' newest reports)."""
        out = {}
        for slot, report in self.reports.items():
            if report.n >= 0:
                out[slot] = max(0, report.start + report.n - self.next.get(slot, report.start))
        return out

    def steps_left(self) -> int | None:
        """Steps still to come before every source is read to its end, as of the newest reports; None while
        that end is not known: a generator, a followed directory, a topic without ``endingOffsets: latest``,
        or a slot that has not reported yet. A directory's channels read a fixed share a step, so its count
        is exact; a topic's steps share ``maxRecordsPerStep``, so its count is what its backlog needs."""
        left = 0
        lags = self.lag()
        for stage in self.graph.sources():
            if (stage.generator is not None or (stage.file is not None and stage.file.follow)
                    or (stage.kafka is not None and stage.kafka.ending != "latest")):
                return None
            lag = {s: n for s, n in lags.items() if s.stage == stage.name}
            if stage.kafka is not None:
                if not lag or not self._all_listed(stage):
                    return None
                cap = stage.kafka.max_records_per_step
                backlog = sum(lag.values())
                left = max(left, -(-backlog // cap) if cap else int(backlog > 0))
                continue
            if len(lag) < stage.parallelism:
                return None
            total = rows_per_step(stage)
            left = max(left, max(-(-n // max(1, channel_share(total, stage.parallelism, s.index)))
                                 for s, n in lag.items()))
        return left

    def plan(self) -> Plan:
        """The offsets of the next step."""
        plan = Plan()
        for stage in self.graph.sources():
            if stage.kafka is not None:
                self._plan_dynamic(stage, plan)
            else:
                self._plan_fixed(stage, plan)
        return plan

    def _plan_fixed(self, stage: StageSpec, plan: Plan) -> None:
        total = rows_per_step(stage)
        for i in range(stage.parallelism):
            slot = Slot(stage.name, i)
            start = self.next.get(slot, 0)
            share = channel_share(total, stage.parallelism, i)
            if stage.generator is not None:
                plan.offsets[slot] = (start, start + share)
                plan.exhausted = False
                continue
            seen = self.reports.get(slot)
            if seen is None or seen.start != start:
                plan.reported = plan.exhausted = False
                plan.offsets[slot] = (start, start)
                continue
            n = share if seen.n < 0 else min(seen.n, share)
            plan.offsets[slot] = (start, start + n)
            plan.exhausted = plan.exhausted and seen.exhausted and n == 0

    def _plan_dynamic(self, stage: StageSpec, plan: Plan) -> None:
        assert stage.kafka is not None
        listed = {Slot(c.stage, p) for c, found in self.listed.items() if c.stage == stage.name for p in found}
        slots = sorted({s for s in self.reports if s.stage == stage.name}
                       | {s for s in self.next if s.stage == stage.name})
        if not any(s in self.reports for s in slots):
            plan.reported = plan.exhausted = False  # no reader has listed the topic yet
        if not self._all_listed(stage) or not listed <= self.reports.keys():
            plan.exhausted = False  # a channel or partition not heard from may hold records
        backlog: dict[Slot, int] = {}
        for slot in slots:
            seen = self.reports.get(slot)
            start = self.next.get(slot, seen.start if seen is not None else 0)
            if seen is None or seen.start != start:
                plan.offsets[slot] = (start, start)  # stale or missing: nothing this step
                plan.exhausted = False
                continue
            backlog[slot] = max(0, seen.n)
            plan.exhausted = plan.exhausted and seen.exhausted and seen.n == 0
        limit = stage.kafka.max_records_per_step
        taken = shares(backlog, limit) if limit else backlog
        for slot, n in taken.items():
            start = self.next.get(slot, self.reports[slot].start)
            plan.offsets[slot] = (start, start + n)
