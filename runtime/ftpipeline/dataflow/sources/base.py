"""What every source offers the runtime: availability and replayable reads by offset.

A source stage has ``parallelism`` channels; each channel is an independent,
ordered stream of rows numbered from 0 (like a Kafka partition). The
coordinator records, before step S runs, the offset range ``[lo, hi)`` each
channel reads in S; reading the same range again returns the same rows, which
is what makes every step replayable (FlameStream's input replay, Feldera's
input log).

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
    def available(self, channel: int, start: int) -> int | None:
        """Rows readable from offset ``start`` now; ``None`` means unbounded."""
        ...

    def exhausted(self, channel: int, start: int) -> bool:
        """True when no row at or after ``start`` will ever appear (bounded input read to its end)."""
        ...

    def read(self, channel: int, step: int, lo: int, hi: int) -> SourceBatch:
        """Rows ``[lo, hi)`` of ``channel``; deterministic for a given range."""
        ...


def channel_share(rows_per_step: int, parallelism: int, channel: int) -> int:
    """Rows per step of one channel: an even split, the first channels taking the remainder."""
    base, extra = divmod(rows_per_step, parallelism)
    return base + (1 if channel < extra else 0)
