"""What every source offers the runtime: availability and replayable reads by offset.

A source stage has ``parallelism`` channels. Offsets are kept per *slot*, an
independent, ordered stream of records: each channel of a generator or a
directory of files is one slot, its rows numbered from 0; a Kafka partition
is one slot, numbered by Kafka's offsets, read by channel ``partition mod
parallelism`` (``lineage.naming.Slot``). The coordinator records, before
step S runs, the offset range ``[lo, hi)`` each slot reads in S; reading the
same range again returns the same rows, which is what makes every step
replayable (FlameStream's input replay, Feldera's input log).

Rows that cannot be parsed are not dropped: they come back as
:class:`DeadLetter` records, which the runtime writes to the dead-letter
output and counts, and the step still commits.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import pyarrow as pa


@dataclass(frozen=True)
class DeadLetter:
    """One record that could not be turned into a row."""

    record: str       # the raw text (or a repr for binary formats)
    reason: str       # why, naming the field: "field 'amount': expected long, got 'abc'"
    location: str     # where it came from: "<file>:<line>"


@dataclass(frozen=True)
class SourceBatch:
    table: pa.Table
    dead_letters: list[DeadLetter] = field(default_factory=list)


class SourceReader(Protocol):
    def slots(self, channel: int) -> list[int]:
        """The slots ``channel`` reads now (a Kafka topic may gain partitions while it runs)."""
        ...

    def first_offset(self, slot: int, fresh: bool) -> int:
        """Where a slot with no recorded offset starts: ``fresh`` when the run has recorded none of this
        source's slots yet (the source's starting offsets apply), otherwise it appeared at run time."""
        ...

    def available(self, slot: int, start: int) -> int | None:
        """Offsets readable from ``start`` now; ``None`` means unbounded."""
        ...

    def exhausted(self, slot: int, start: int) -> bool:
        """True when no row at or after ``start`` will ever appear (bounded input read to its end)."""
        ...

    def read(self, slot: int, step: int, lo: int, hi: int) -> SourceBatch:
        """Rows ``[lo, hi)`` of ``slot``; deterministic for a given range."""
        ...

    def empty(self) -> pa.Table:
        """The rows of a channel that reads no slot (more channels than Kafka partitions)."""
        ...


class OneSlotPerChannel:
    """Slots of a source whose channels are its slots, numbered from 0 (generators, files)."""

    def slots(self, channel: int) -> list[int]:
        return [channel]

    def first_offset(self, slot: int, fresh: bool) -> int:
        return 0

    def empty(self) -> pa.Table:
        return pa.table({})  # never asked: every channel has its slot


def read_ranges(reader: SourceReader, step: int, ranges: tuple[tuple[int, int, int], ...]) -> SourceBatch:
    """What a source task reads: each of its slots' ranges, in slot order, as one table."""
    batches = [reader.read(slot, step, lo, hi) for slot, lo, hi in ranges]
    if not batches:
        return SourceBatch(reader.empty())
    if len(batches) == 1:
        return batches[0]
    tables = [b.table for b in batches if b.table.num_rows] or [batches[0].table]
    return SourceBatch(pa.concat_tables(tables, promote_options="permissive"),
                       [d for b in batches for d in b.dead_letters])


def channel_share(rows_per_step: int, parallelism: int, channel: int) -> int:
    """Rows per step of one channel: an even split, the first channels taking the remainder."""
    base, extra = divmod(rows_per_step, parallelism)
    return base + (1 if channel < extra else 0)
