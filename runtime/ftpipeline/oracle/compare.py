"""Comparing what a run released with the oracle: rows as multisets, floats within a tolerance.

A row of the output is a multiset element: a missing row, an extra row and
a duplicated row are each an error. ``duplicates`` counts the extra rows that
are copies of an expected row (released twice), not rows the input itself
holds twice. Columns of floating-point type are not
compared to the last bit: a double ``sum`` over the same rows in another
order (the runtime merges partial sums per step, the oracle sums over a
window) differs in its last digits. Two values are equal when
``math.isclose(a, b, rel_tol=FLOAT_REL_TOL, abs_tol=FLOAT_ABS_TOL)`` (NaN
equals NaN, null only null). Every other column compares exactly.

How: rows are grouped by their exact columns; within a group both sides are
sorted by their float columns and walked together, pairing values that are
close. A group whose floats are all close pairs up exactly as an exact
comparison would.

Dead letters compare as multisets of (stage, step, location, record); the
reason's wording is the runtime's own and is not compared. An aggregate's
dead letters (rows with a null key) compare by their record's JSON object,
since which channel saw a row is not the oracle's business.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from ftpipeline.objectstore.base import open_store
from ftpipeline.oracle.expected import canonical
from ftpipeline.oracle.files import Letter

FLOAT_REL_TOL = 1e-9    # a double sum of 10^6 values in another order stays within ~1e-10 relative
FLOAT_ABS_TOL = 1e-12   # values that should be 0 but are a rounding residue


@dataclass(frozen=True)
class Comparison:
    sink: str
    expected_rows: int
    actual_rows: int
    missing: int
    extra: int
    duplicates: int
    what: str = "output"
    note: str = ""          # said after the counts (why a difference is expected)
    binding: bool = True    # False: a difference is reported, not an error (the batch truth of a run with late rows)

    @property
    def equal(self) -> bool:
        return self.missing == 0 and self.extra == 0 and self.expected_rows == self.actual_rows

    @property
    def holds(self) -> bool:
        """Equal, or a difference that is no error."""
        return self.equal or not self.binding

    def __str__(self) -> str:
        against = "the batch truth" if self.what == "batch truth" else "the oracle"
        verdict = f"equals {against}" if self.equal else f"DIFFERS from {against}"
        if self.what == "batch truth" and self.note.startswith("not compared: "):
            return f"{self.sink}: not compared with the batch truth: {self.note.removeprefix('not compared: ')}"
        if self.what == "batch truth":
            return (f"{self.sink}: output {verdict} (the same query as one batch, no watermark): {self.actual_rows} "
                    f"rows (expected {self.expected_rows}), {self.missing} missing, {self.extra} extra"
                    + (f"; {self.note}" if self.note else ""))
        counts = (f"{self.missing} missing, {self.extra} extra, {self.duplicates} duplicated")
        if self.what == "dead letters":
            return f"dead letters: {verdict}: {self.actual_rows} records (expected {self.expected_rows}), {counts}"
        if self.what == "late data":
            return (f"late data of {self.sink}: {verdict}: {self.actual_rows} records (expected "
                    f"{self.expected_rows}), {counts}")
        return f"{self.sink}: output {verdict}: {self.actual_rows} rows (expected {self.expected_rows}), {counts}"


def _close(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is b
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return math.isclose(a, b, rel_tol=FLOAT_REL_TOL, abs_tol=FLOAT_ABS_TOL)


def _rows_close(a: Sequence[Any], b: Sequence[Any]) -> bool:
    return all(_close(x, y) for x, y in zip(a, b))


def _order(row: Sequence[Any]) -> tuple[Any, ...]:
    return tuple((0, 0.0) if v is None else (1, -math.inf if math.isnan(v) else v) for v in row)


def _values(column: pa.ChunkedArray) -> list[Any]:
    """A column's values to compare: a timestamp as its integer (the end of input's watermark, 2^63 - 1 us, is
    no date Python holds)."""
    values: list[Any] = (column.cast(pa.int64()) if pa.types.is_timestamp(column.type) else column).to_pylist()
    return values


def _groups(table: pa.Table, exact: list[str], floats: list[str]) -> dict[tuple[Any, ...], list[tuple[Any, ...]]]:
    out: dict[tuple[Any, ...], list[tuple[Any, ...]]] = {}
    keys = zip(*(_values(table[c]) for c in exact)) if exact else iter(lambda: (), None)
    values = zip(*(table[c].to_pylist() for c in floats)) if floats else iter(lambda: (), None)
    for _, key, value in zip(range(table.num_rows), keys, values):
        out.setdefault(tuple(key), []).append(tuple(value))
    for rows in out.values():
        rows.sort(key=_order)
    return out


def compare_tables(name: str, expected: pa.Table, actual: pa.Table) -> Comparison:
    """``actual`` against ``expected`` (the same columns) as multisets, floats within the tolerance."""
    floats = [f.name for f in expected.schema if pa.types.is_floating(f.type)]
    exact = [f.name for f in expected.schema if f.name not in floats]
    want, got = _groups(expected, exact, floats), _groups(actual, exact, floats)
    missing = extra = duplicates = 0
    for key in want.keys() | got.keys():
        e, a = want.get(key, []), got.get(key, [])
        i = j = 0
        surplus: list[tuple[Any, ...]] = []
        while i < len(e) and j < len(a):
            if _rows_close(e[i], a[j]):
                i, j = i + 1, j + 1
            elif _order(e[i]) < _order(a[j]):
                missing, i = missing + 1, i + 1
            else:
                surplus.append(a[j])
                j += 1
        missing += len(e) - i
        surplus += a[j:]
        extra += len(surplus)
        duplicates += sum(1 for row in surplus if any(_rows_close(row, x) for x in e))
    return Comparison(name, expected.num_rows, actual.num_rows, missing, extra, duplicates)


def read_dead_letters(root: Path | str, steps: int) -> list[Letter]:
    """The dead letters the run wrote for steps 1..``steps`` (``dataflow/deadletter.py``'s files)."""
    out = []
    store = open_store(root)
    for key in store.list():
        if not key.endswith(".jsonl"):
            continue
        for line in store.get(key).decode().splitlines():
            doc = json.loads(line)
            if int(doc["step"]) <= steps:
                out.append(Letter(doc["stage"], int(doc["step"]), doc["location"], doc["record"]))
    return out


def compare_letters(expected: Iterable[Letter], actual: Iterable[Letter], sources: set[str]) -> Comparison:
    """Multisets of dead letters; those of stages not in ``sources`` (aggregates) by their JSON object."""
    def key(letter: Letter) -> Letter:
        if letter.stage in sources:
            return letter
        return Letter(letter.stage, letter.step, letter.stage, canonical(letter.record))

    want, got = Counter(map(key, expected)), Counter(map(key, actual))
    return Comparison("dead letters", sum(want.values()), sum(got.values()),
                      missing=sum((want - got).values()), extra=sum((got - want).values()),
                      duplicates=sum(n - 1 for n in got.values() if n > 1), what="dead letters")
