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
    bad = pc.is_null(ts)
    for key in keys:
        bad = pc.or_(bad, pc.is_null(table.column(key)))
    if not pc.any(bad).as_py():
        return table, ts, []
    dead = []
    for row in table.filter(bad).to_pylist():
        missing = [k for k in keys if row.get(k) is None]
        why = f"null key in {', '.join(missing)}" if missing else f"null event time in {column}"
        dead.append(DeadLetter(json.dumps(row, default=str), why, where))
    good = pc.invert(bad)
    return table.filter(good), ts.filter(good), dead
