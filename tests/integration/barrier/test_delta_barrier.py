"""The Delta barrier on a volume and in a bucket of the real S3 server: one commit per step, in order; a
replay skipped; a zombie's commit from a stale snapshot refused; a step the table's schema refuses failing
as the user's error; the table read back by the oracle's own log reader and by delta-rs alike (and, on a
volume, by Spark with delta-spark, in a process of its own: a session's class path is fixed at its start)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from ftpipeline.barrier.delta import DeltaBarrier, DeltaReleaseError, storage_options
from ftpipeline.embedded.s3 import EmbeddedS3
from ftpipeline.objectstore.base import open_store
from ftpipeline.oracle.delta import released_table
from ftpipeline.spec.model import DeltaSink, PipelineSpec, StageKind, StageSpec

READ_WITH_SPARK = """
import sys
from ftpipeline.barrier.delta import SPARK_SETTINGS
from ftpipeline.worker.session import build_session
spark = build_session("local[1]", dict(SPARK_SETTINGS), __import__("pathlib").Path(sys.argv[2]), "read")
print(spark.read.format("delta").load(sys.argv[1]).count())
"""


@pytest.fixture(params=["volume", "bucket"])
def location(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path | str:
    if request.param == "volume":
        return tmp_path / "table"
    server: EmbeddedS3 = request.getfixturevalue("s3_server")
    bucket: str = request.getfixturevalue("s3_bucket")
    for name, value in server.config.to_env().items():
        monkeypatch.setenv(name, value)
    return f"s3://{bucket}/orders/table"


def _spec(tmp_path: Path) -> PipelineSpec:
    return PipelineSpec(name="orders", image=None, entry_point="orders.py", workers=1, stages=(), base_dir=tmp_path)


def _stage(barrier: DeltaBarrier, step: int, columns: dict[str, pa.Array] | None = None) -> None:
    for channel in (0, 1):
        rows = pa.table(columns or {"k": [f"s{step}c{channel}r{i}" for i in range(3)],
                                    "v": [step * 10 + channel] * 3})
        barrier.stage_batches(step, channel, rows.schema, [rows])


def test_each_step_is_one_commit_in_order_a_replay_adds_nothing_and_a_zombies_commit_is_refused(
        tmp_path: Path, location: Path | str) -> None:
    spec = _spec(tmp_path)
    sink = DeltaSink(location, partition_by=("v",))
    barrier, zombie = DeltaBarrier("table", sink, spec), DeltaBarrier("table", sink, spec)
    assert barrier.gt_last() == 0
    _stage(barrier, 1)
    _stage(barrier, 2)
    with pytest.raises(DeltaReleaseError, match="cannot release step 2 of sink table before step 1"):
        barrier.release(2, 2)
    assert barrier.release(1, 2) is True
    assert barrier.release(1, 2) is False, "a replay: the table holds it"
    stale = zombie._snapshot()  # a zombie read the table when step 1 was its newest...
    assert barrier.release(2, 2) is True
    versions = DeltaTable(str(location), storage_options=barrier.options or None).version()
    with zombie._lock:  # ...and commits step 2 from that snapshot: refused, and answered as held
        zombie._commit(stale, 2, pa.RecordBatchReader.from_batches(
            pa.schema([("k", pa.string()), ("v", pa.int64())]),
            [pa.record_batch([pa.array(["zombie"]), pa.array([20])], names=["k", "v"])]))
    table = DeltaTable(str(location), storage_options=barrier.options or None)
    assert table.version() == versions, "the zombie's commit was refused: no version added"
    assert barrier.gt_last() == 2 and table.metadata().partition_columns == ["v"]
    assert open_store(location).child("_ftpipeline_staging").list() == [], "released steps leave no parts"
    by_oracle = released_table(spec, StageSpec("table", StageKind.SINK, 2, (), delta_sink=sink), 2)
    assert by_oracle is not None and by_oracle.num_rows == 12
    assert sorted(by_oracle.column("k").to_pylist()) == sorted(table.to_pyarrow_table().column("k").to_pylist())
    first = released_table(spec, StageSpec("table", StageKind.SINK, 2, (), delta_sink=sink), 1)
    assert first is not None and sorted(set(first.column("v").to_pylist())) == ["10", "11"], "as of step 1 alone"
    if isinstance(location, Path):  # plain Spark with delta-spark reads what delta-rs wrote
        done = subprocess.run([sys.executable, "-c", READ_WITH_SPARK, str(location), str(tmp_path / "spark")],
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        assert done.stdout.strip().splitlines()[-1] == "12"


def test_a_step_the_tables_schema_refuses_is_the_users_error_and_merge_schema_takes_it(
        tmp_path: Path, location: Path | str) -> None:
    spec = _spec(tmp_path)
    strict = DeltaBarrier("table", DeltaSink(location), spec)
    _stage(strict, 1)
    assert strict.release(1, 2)
    _stage(strict, 2, {"k": ["a"], "v": [1], "extra": ["new"]})
    with pytest.raises(DeltaReleaseError, match="refuses step 2.*mergeSchema") as refused:
        strict.release(2, 2)
    assert refused.value.user and strict.gt_last() == 1
    merging = DeltaBarrier("table", DeltaSink(location, merge_schema=True), spec)
    assert merging.release(2, 2) and merging.gt_last() == 2
    table = DeltaTable(str(location), storage_options=storage_options(None) if isinstance(location, str) else None)
    assert "extra" in table.schema().to_arrow().names and table.to_pyarrow_table().num_rows == 8


def test_a_table_behind_an_https_endpoint_of_a_private_ca_is_released_trusting_the_ca_file(tmp_path: Path) -> None:
    """As ``spec.objectStore.caSecretRef`` gives it (AWS_CA_BUNDLE): delta-rs has no CA option, so the barrier
    adds the CA to what this process trusts; the table is then committed and read over TLS."""
    from ftpipeline.worker.tls import generate

    certs = generate("object-store", ("localhost",)).write(tmp_path / "tls")
    with EmbeddedS3(tmp_path / "s3", tls_dir=certs) as server:
        server.create_bucket("secure")
        assert server.endpoint.startswith("https://") and server.config.ca_file
        barrier = DeltaBarrier("table", DeltaSink("s3://secure/table"), _spec(tmp_path), config=server.config)
        _stage(barrier, 1)
        assert barrier.release(1, 2) and barrier.gt_last() == 1
        table = DeltaTable("s3://secure/table", storage_options=storage_options(server.config))
        assert table.to_pyarrow_table().num_rows == 6


def _one(barrier: DeltaBarrier, step: int, parts: list[pa.Table]) -> None:
    for channel, rows in enumerate(parts):
        barrier.stage_batches(step, channel, rows.schema, [rows])


def test_a_column_of_another_type_is_refused_naming_it_where_delta_rs_would_have_cast_it(
        tmp_path: Path, location: Path | str) -> None:
    barrier = DeltaBarrier("table", DeltaSink(location), _spec(tmp_path))
    _one(barrier, 1, [pa.table({"k": ["a"], "n": pa.array([1], pa.int64())})])
    assert barrier.release(1, 1)
    _one(barrier, 2, [pa.table({"k": ["b"], "n": [1.9]})])
    with pytest.raises(DeltaReleaseError, match="n is .*double.* in the step, .*long.* in the table") as refused:
        barrier.release(2, 1)
    assert refused.value.user and barrier.gt_last() == 1


def test_parts_are_matched_by_name_nulls_fill_what_a_step_lacks_and_no_column_refuses_a_later_null(
        tmp_path: Path, location: Path | str) -> None:
    barrier = DeltaBarrier("table", DeltaSink(location), _spec(tmp_path))
    counted = pa.schema([pa.field("k", pa.string(), nullable=False), pa.field("n", pa.int64(), nullable=False)])
    _one(barrier, 1, [pa.table({"k": ["a"], "n": [1]}, schema=counted),            # Spark's non-null count
                      pa.table({"n": [2], "k": ["b"]})])                            # another column order
    assert barrier.release(1, 2)
    _one(barrier, 2, [pa.table({"k": ["c"]}), pa.table({"k": [None], "n": [None]}, schema=pa.schema(
        [("k", pa.string()), ("n", pa.int64())]))])
    assert barrier.release(2, 2)
    rows = DeltaTable(str(location), storage_options=barrier.options or None).to_pyarrow_table()
    assert sorted(zip(rows.column("k").to_pylist(), rows.column("n").to_pylist()), key=str) == sorted(
        [("a", 1), ("b", 2), ("c", None), (None, None)], key=str)


def test_partition_columns_the_step_lacks_are_the_users_error_before_any_table_is_made(
        tmp_path: Path, location: Path | str) -> None:
    barrier = DeltaBarrier("table", DeltaSink(location, partition_by=("day",)), _spec(tmp_path))
    _one(barrier, 1, [pa.table({"k": ["a"]})])
    with pytest.raises(DeltaReleaseError, match=r"partitionBy names \['day'\]") as refused:
        barrier.release(1, 1)
    assert refused.value.user and barrier.gt_last() == 0
    assert open_store(location).child("_delta_log").list() == []
