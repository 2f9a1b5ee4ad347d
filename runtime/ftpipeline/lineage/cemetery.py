"""The cemetery as interval sets, so its size does not grow with the steps.

Quokka's cemetery table (CT) holds, per edge, the *set* of sequence numbers
whose object has been consumed and is needed by no current or future task.
Stored as a plain Redis set it grows by one member per step per edge, forever;
the seed itself names this as the design's weakness (quadratic in channels,
linear in time). Consumption is almost always in order — step S is consumed
after step S-1 — so the set is, nearly always, one consumed prefix ``[1, S]``
plus a few exceptions (a step resurrected by recovery, a step consumed out of
order during replay). We store it as a sorted list of disjoint inclusive
intervals: in-order consumption keeps it at one interval whatever the number
of steps, and each exception costs at most one more.

The same representation lives in two places: this pure class (used by the
planner and by tests) and the Lua scripts in ``lua/`` that update it inside
Redis atomically. ``encode``/``decode`` define the stored form, a flat JSON
array ``[lo1, hi1, lo2, hi2, ...]``; a property test keeps both in agreement.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Iterable, Iterator


class IntervalSet:
    """A set of non-negative integers kept as sorted, disjoint, non-adjacent intervals."""

    __slots__ = ("_bounds",)

    def __init__(self, members: Iterable[int] = ()) -> None:
        self._bounds: list[int] = []  # lo1, hi1, lo2, hi2 ... (inclusive)
        for m in members:
            self.add(m)

    # --- stored form -------------------------------------------------------
    def encode(self) -> str:
        return json.dumps(self._bounds, separators=(",", ":"))

    @classmethod
    def decode(cls, text: str | bytes | None) -> IntervalSet:
        out = cls()
        if text:
            bounds = json.loads(text)
            if not isinstance(bounds, list) or len(bounds) % 2:
                raise ValueError(f"not an interval list: {text!r}")
            ints = [int(b) for b in bounds]
            # sorted, each lo <= hi, and a gap of at least one between intervals
            for i in range(0, len(ints), 2):
                if ints[i] > ints[i + 1] or (i and ints[i] <= ints[i - 1] + 1):
                    raise ValueError(f"not sorted, disjoint, non-adjacent intervals: {text!r}")
            out._bounds = ints
        return out

    # --- queries -----------------------------------------------------------
    def __contains__(self, value: object) -> bool:
        if not isinstance(value, int):
            return False
        i = bisect.bisect_right(self._bounds, value)
        # Inside [lo, hi] when the insertion point is odd (after a lo), or value == a hi.
        return i % 2 == 1 or (i > 0 and self._bounds[i - 1] == value)

    def intervals(self) -> list[tuple[int, int]]:
        b = self._bounds
        return [(b[i], b[i + 1]) for i in range(0, len(b), 2)]

    def __iter__(self) -> Iterator[int]:
        for lo, hi in self.intervals():
            yield from range(lo, hi + 1)

    def __len__(self) -> int:
        return sum(hi - lo + 1 for lo, hi in self.intervals())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, IntervalSet) and self._bounds == other._bounds

    def __repr__(self) -> str:
        return f"IntervalSet({self.intervals()})"

    # --- updates -----------------------------------------------------------
    def add(self, value: int) -> None:
        iv = self.intervals()
        iv.append((value, value))
        self._set(iv)

    def discard(self, value: int) -> None:
        if value not in self:
            return
        out: list[tuple[int, int]] = []
        for lo, hi in self.intervals():
            if lo <= value <= hi:
                if lo < value:
                    out.append((lo, value - 1))
                if value < hi:
                    out.append((value + 1, hi))
            else:
                out.append((lo, hi))
        self._set(out)

    def _set(self, intervals: list[tuple[int, int]]) -> None:
        merged: list[tuple[int, int]] = []
        for lo, hi in sorted(intervals):
            if merged and lo <= merged[-1][1] + 1:
                merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
            else:
                merged.append((lo, hi))
        self._bounds = [x for pair in merged for x in pair]
