"""The numpy Murmur3 that routes hash edges is Spark's ``hash``, value for value.

Routes, snapshot re-partitioning on a rescale and checkpoints already written all assume the
channel of a key is ``pmod(hash(keys), n)`` as Spark computes it; ``dataflow/murmur3.py``
computes it without Spark. Compared here with real Spark's ``hash`` on random tables of every
type a task's rows take (nulls, empty and multi-byte strings, ``-0.0``, NaN, extreme integers),
one column and several at a time, and with ``pmod``; on chunked and sliced columns; and a type it does not hash (decimal) falls
back to Spark's answer through ``partition.channels_of``.
"""

from __future__ import annotations

import decimal
from typing import Any

import numpy as np
import pyarrow as pa
from hypothesis import HealthCheck, given, settings

from ftpipeline.dataflow import murmur3
from ftpipeline.dataflow.frames import to_dataframe
from ftpipeline.dataflow.partition import channels_of

from .test_plan_paths import SCHEMA, _table, rows  # every type a task's rows may have

KEY_SETS = [[name] for name in SCHEMA.names] + [["user", "n64"], ["flag", "note", "f64", "n32", "day", "at"]]
ROW = "__row"


def _spark_hashes(spark: Any, table: pa.Table, key_sets: list[list[str]],
                  parallelism: int) -> list[tuple[list[int], list[int]]]:
    """Spark's ``hash`` and ``pmod(hash, parallelism)`` of each key set, row by row (one Spark job)."""
    from pyspark.sql import functions as F

    numbered = table.append_column(ROW, pa.array(range(table.num_rows), pa.int64()))
    columns = [F.col(ROW)]
    for i, keys in enumerate(key_sets):
        hashed = F.hash(*[F.col(k) for k in keys])
        columns += [hashed.alias(f"h{i}"), F.pmod(hashed, F.lit(parallelism)).alias(f"c{i}")]
    out = to_dataframe(spark, numbered).select(*columns).toArrow().sort_by(ROW)
    return [(out[f"h{i}"].to_pylist(), out[f"c{i}"].to_pylist()) for i in range(len(key_sets))]


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=rows)
def test_every_type_hashes_as_spark_hashes_it(spark: Any, data: list[tuple[Any, ...]]) -> None:
    table = _table(data)
    for keys, (hashes, channels) in zip(KEY_SETS, _spark_hashes(spark, table, KEY_SETS, 7)):
        ours = murmur3.spark_hash(table, keys)
        assert ours is not None, keys
        assert ours.tolist() == hashes, keys
        routed = murmur3.channels(table, keys, 7)
        assert routed is not None and routed.to_pylist() == channels, keys


def test_chunked_and_sliced_columns_hash_as_whole_ones(spark: Any) -> None:
    words = [f"user-{i}" * (i % 4) for i in range(200)]
    whole = pa.table({"s": words})
    chunked = pa.Table.from_batches(whole.to_batches(max_chunksize=33))
    sliced = pa.concat_tables([whole.slice(0, 50), whole.slice(50)])
    [(expected, _)] = _spark_hashes(spark, whole, [["s"]], 3)
    for table in (chunked, sliced, whole.slice(17, 100)):
        got = murmur3.spark_hash(table, ["s"])
        assert got is not None
        start = 17 if table.num_rows == 100 else 0
        assert got.tolist() == expected[start:start + table.num_rows]


def test_a_type_numpy_does_not_hash_is_routed_by_spark(spark: Any) -> None:
    table = pa.table({"d": pa.array([decimal.Decimal("1.50"), None, decimal.Decimal("-7.25")], pa.decimal128(9, 2))})
    assert murmur3.spark_hash(table, ["d"]) is None
    [(_, channels)] = _spark_hashes(spark, table, [["d"]], 4)
    assert channels_of(spark, table, ["d"], 4).to_pylist() == channels
    assert np.array_equal(channels_of(spark, table.slice(1), ["d"], 4).to_numpy(), np.array(channels[1:]))
