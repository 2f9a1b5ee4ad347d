"""Which tasks go through files, and how many shuffle partitions a large one gets."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from ftpipeline.dataflow.spill import BATCH_ROWS, MAX_PARTITIONS, PARTITION_BYTES, Written, partitions, through_files

MiB = 1024 * 1024


def test_a_task_goes_through_files_when_its_input_is_over_the_limit_and_always_with_limit_zero() -> None:
    table = pa.table({"x": pa.array(range(1000), pa.int64())})  # 8,000 bytes
    assert not through_files(table, 8000)
    assert through_files(table, 7999)
    assert through_files(pa.table({"x": pa.array([], pa.int64())}), 0)


def test_partitions_scale_with_the_input_in_multiples_of_the_cores_up_to_a_cap() -> None:
    assert partitions(1, 4) == 4, "a small step still uses every core"
    assert partitions(PARTITION_BYTES * 5, 4) == 8
    assert partitions(PARTITION_BYTES * 8, 4) == 8
    assert partitions(PARTITION_BYTES * 100, 3) == 102
    assert partitions(PARTITION_BYTES * 10**6, 2) == MAX_PARTITIONS
    assert partitions(10 * MiB, 0) == 1


def test_a_written_result_reads_back_in_batches_of_its_schema_and_as_one_empty_batch_when_empty(tmp_path: Path) -> None:
    schema = pa.schema([("k", pa.large_string()), ("v", pa.int64())])
    rows = BATCH_ROWS + 10
    (tmp_path / "r").mkdir()
    pq.write_table(pa.table({"v": pa.array(range(rows), pa.int64()), "k": [str(i) for i in range(rows)]}),
                   tmp_path / "r" / "part-00000.parquet")
    pq.write_table(pa.table({"v": pa.array([7], pa.int64()), "k": ["7"]}), tmp_path / "r" / "part-00001.parquet")
    pieces = list(Written(tmp_path / "r", schema).batches())
    assert [p.num_rows for p in pieces] == [BATCH_ROWS, 10, 1]
    assert all(p.schema == schema for p in pieces), "cast to what toArrow would give"
    assert pa.concat_tables(pieces)["v"].to_pylist() == [*range(rows), 7]
    (tmp_path / "e").mkdir()
    [empty] = list(Written(tmp_path / "e", schema).batches())
    assert empty.num_rows == 0 and empty.schema == schema
