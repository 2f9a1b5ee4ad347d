"""What every event-time operator does first with a step's rows: the rows it cannot place are dead letters.

A row without a key cannot be kept in keyed state (null never equals null),
and a row without an event time has no window and no horizon: both go to
the dead-letter output, named by the column, and the step goes on.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from ftpipeline.dataflow.sources.base import DeadLetter
from ftpipeline.eventtime.columns import micros


def usable(table: pa.Table, keys: Sequence[str], column: str, field: str,
           where: str) -> tuple[pa.Table, pa.Array, list[DeadLetter]]:
    """The rows with every key and an event time, their event times (us), and the others as dead letters.
    ``field`` names the time column's setting for an error; ``where`` the channel."""
    ts = micros(table, column, field)
    good, dead = _apart(table, pc.is_null(ts), keys, column, where)
    return (table, ts, []) if good is None else (table.filter(good), ts.filter(good), dead)


def keyed(table: pa.Table, keys: Sequence[str], where: str) -> tuple[pa.Table, list[DeadLetter]]:
    """The rows with every key, and the others as dead letters (an operator with no event time of its own)."""
    good, dead = _apart(table, pa.array([False] * table.num_rows, pa.bool_()), keys, "", where)
    return (table, []) if good is None else (table.filter(good), dead)


def _apart(table: pa.Table, bad: pa.Array, keys: Sequence[str], column: str, where: str
           ) -> tuple[pa.Array | None, list[DeadLetter]]:
    """Which rows to keep (None: all) and the dead letters of the others: ``bad`` ones, and any with a null key."""
    for key in keys:
        bad = pc.or_(bad, pc.is_null(table.column(key)))
    if not pc.any(bad).as_py():
        return None, []
    dead = []
    for row in table.filter(bad).to_pylist():
        missing = [k for k in keys if row.get(k) is None]
        why = f"null key in {', '.join(missing)}" if missing else f"null event time in {column}"
        dead.append(DeadLetter(json.dumps(row, default=str), why, where))
    return pc.invert(bad), dead


def without(rows: pa.Table, names: Sequence[str], used: Sequence[str], field: str) -> pa.Table:
    """``rows`` without the columns ``names`` (those an operator's output gives its own meaning, such as a
    window's ``window_start``: a window fed by a window), unless one is ``used`` (a key or an aggregation's
    column), which is refused naming the field."""
    clash = [n for n in names if n in rows.column_names and n in used]
    if clash:
        raise ValueError(f"{field}: {clash[0]!r} is also a column of this stage's output (its own window's); "
                         "rename it upstream")
    gone = [n for n in names if n in rows.column_names]
    return rows.drop_columns(gone) if gone else rows
