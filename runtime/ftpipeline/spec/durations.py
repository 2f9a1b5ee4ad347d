"""Durations as a pipeline writes them (``10s``, ``1m``, ``30min``, ``250ms``), in microseconds.

Event time is kept in microseconds, Spark's precision for timestamps, so a
window's bounds, a watermark's bound and a lateness are all one unit and
compare exactly; the spec speaks in the units people write.
"""

from __future__ import annotations

import re

PATTERN = r"^[0-9]{1,12}(us|ms|s|m|min|h|d)$"
SIGNED_PATTERN = r"^-?[0-9]{1,12}(us|ms|s|m|min|h|d)$"  # a bound that may lie before (a join's ``within``)
_UNITS = {"us": 1, "ms": 1_000, "s": 1_000_000, "m": 60_000_000, "min": 60_000_000, "h": 3_600_000_000,
          "d": 86_400_000_000}
_TEXT = re.compile(PATTERN)


def micros(text: str) -> int:
    """``text`` in microseconds; ValueError for anything but a whole number and a unit."""
    match = _TEXT.match(text)
    if match is None:
        raise ValueError(f"not a duration: {text!r} (a whole number and a unit: us, ms, s, m, min, h, d)")
    return int(text[:match.start(1)]) * _UNITS[match.group(1)]


def signed_micros(text: str) -> int:
    """As :func:`micros`, with an optional leading minus."""
    return -micros(text[1:]) if text.startswith("-") else micros(text)


def text(us: int) -> str:
    """A duration in the largest unit that divides it: the inverse of :func:`micros`."""
    for unit in ("d", "h", "m", "s", "ms"):
        if us and us % _UNITS[unit] == 0:
            return f"{us // _UNITS[unit]}{unit}"
    return f"{us}us"
