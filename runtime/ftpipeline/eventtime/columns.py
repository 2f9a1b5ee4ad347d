"""A column of event time as microseconds since the epoch, whatever type holds it.

Spark's timestamps are microseconds; a ``long`` column is taken as
milliseconds since the epoch (Kafka's record timestamps, Flink's convention).
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

# The watermark of the step after every source ended: every window is final (Flink's MAX_WATERMARK).
END_OF_INPUT = 2**63 - 1


class EventTimeError(ValueError):
    """A table has no usable event-time column; the message names the column and the stage."""


def micros(table: pa.Table, column: str, where: str) -> pa.Array:
    """``table[column]`` as int64 microseconds (nulls kept); ``where`` names the field for an error."""
    if table.schema.get_field_index(column) < 0:
        raise EventTimeError(f"{where}: no column {column!r} in the rows (they have: "
                             f"{', '.join(table.schema.names)})")
    values = table.column(column).combine_chunks()
    kind = values.type
    if pa.types.is_timestamp(kind):
        return pc.cast(values.cast(pa.timestamp("us", kind.tz)), pa.int64())
    if pa.types.is_integer(kind):
        return pc.multiply(pc.cast(values, pa.int64()), 1000)
    raise EventTimeError(f"{where}: column {column!r} is {kind}; event time is a timestamp or a long of "
                         f"milliseconds since the epoch")


def span(table: pa.Table, column: str, where: str) -> tuple[int | None, int | None]:
    """The smallest and the largest event time in ``table`` (None when it has no row with one)."""
    if table.num_rows == 0:
        return None, None
    found = pc.min_max(micros(table, column, where)).as_py()
    low, high = found["min"], found["max"]
    return (int(low) if low is not None else None), (int(high) if high is not None else None)
