"""Arrow tables into Spark DataFrames, without losing rows.

PySpark's ``createDataFrame(pyarrow.Table)`` (4.x) silently drops every
record batch that follows an empty batch in the middle of the table: a
table of batches of 3, 0 and 3 rows becomes a DataFrame of 3 rows. A task's
input is the concatenation of its input objects, and an empty object next to
one of a wider schema (two edges, one of which adds a column) leaves exactly
such an empty batch behind. A rebuild concatenates many steps, so it met one:
it folded 315 of its 700 input rows into the state and reported 700.

Every ``createDataFrame`` in the runtime goes through ``to_dataframe``,
which hands Spark only the non-empty batches. (Most tables reach Spark as a
Parquet scan instead, ``dataflow/plans.py``: the Parquet writer keeps every
batch.)
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa


def non_empty(table: pa.Table) -> pa.Table:
    """The same rows and schema, with no zero-row batch."""
    batches = [b for b in table.to_batches() if b.num_rows]
    return pa.Table.from_batches(batches, schema=table.schema)


def to_dataframe(spark: Any, table: pa.Table) -> Any:
    """``spark.createDataFrame(table)`` holding every row of ``table``."""
    return spark.createDataFrame(non_empty(table))
