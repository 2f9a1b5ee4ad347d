"""A Delta sink's released steps, read from the table's transactions: GT_last, the oracle's own reading of
the log as of a step, and what a fresh run does with a table this pipeline or someone else wrote."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

from ftpipeline.barrier.delta import SPARK_SETTINGS, DeltaBarrier, storage_options, wants_delta
from ftpipeline.objectstore.config import S3Config
from ftpipeline.oracle.delta import released_table
from ftpipeline.barrier.existing import prepare_outputs
from ftpipeline.spec import parse_pipeline

PIPELINE = """
apiVersion: ftpipeline.io/v1alpha1
kind: FTPipeline
metadata: {{name: orders}}
spec:
  image: x
  entryPoint: m.py
  workers: 1
  stages:
    - {{name: src, parallelism: 2, source: {{generator: {{function: gen, rowsPerStep: 4}}}}}}
    - {{name: table, parallelism: 2, inputs: [{{stage: src}}], sink: {{delta: {{path: t}}{policy}}}}}
"""


def _spec(tmp_path: Path, policy: str | None = None):  # type: ignore[no-untyped-def]
    return parse_pipeline(PIPELINE.format(policy=f", existingOutput: {policy}" if policy else ""), tmp_path,
                          check_entry_point=False)


def _commit(table: Path, app_id: str | None, step: int, rows: int = 2) -> None:
    data = pa.table({"k": [f"s{step}-{i}" for i in range(rows)]})
    txn = CommitProperties(app_transactions=[Transaction(app_id, step)]) if app_id else None
    write_deltalake(str(table), data, mode="append", commit_properties=txn)


def _barrier(tmp_path: Path, policy: str | None = None) -> DeltaBarrier:
    spec = _spec(tmp_path, policy)
    stage = spec.stage("table")
    assert stage.delta_sink is not None
    return DeltaBarrier("table", stage.delta_sink, spec)


def test_gt_last_is_the_pipelines_own_transaction_version_and_zero_without_a_table(tmp_path: Path) -> None:
    barrier = _barrier(tmp_path)
    assert barrier.gt_last() == 0
    _commit(tmp_path / "t", "someone-else", 7)
    assert barrier.gt_last() == 0, "another writer's transactions are not this pipeline's steps"
    for step in (1, 2, 3):
        _commit(tmp_path / "t", barrier.app_id, step)
    assert barrier.gt_last() == 3


def test_the_oracle_reads_the_log_as_of_a_step_among_other_writers_commits(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    stage = spec.stage("table")
    app = _barrier(tmp_path).app_id
    assert released_table(spec, stage, 1) is None, "no table"
    _commit(tmp_path / "t", "other", 1)        # v0
    assert released_table(spec, stage, 1) is not None
    _commit(tmp_path / "t", app, 1)            # v1
    _commit(tmp_path / "t", None, 0)           # v2: a plain append
    _commit(tmp_path / "t", app, 2)            # v3
    _commit(tmp_path / "t", app, 3)            # v4
    rows = {s: released_table(spec, stage, s) for s in (1, 2, 3, 9)}
    assert {s: t.num_rows for s, t in rows.items() if t is not None} == {1: 6, 2: 8, 3: 10, 9: 10}
    assert sorted(rows[2].column("k").to_pylist()) == sorted(  # type: ignore[union-attr]
        DeltaTable(str(tmp_path / "t"), version=3).to_pyarrow_table().column("k").to_pylist())


def test_the_oracle_refuses_a_log_whose_first_entries_are_gone(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    _commit(tmp_path / "t", "other", 1)
    _commit(tmp_path / "t", "other", 2)
    (tmp_path / "t" / "_delta_log" / f"{0:020d}.json").unlink()
    with pytest.raises(RuntimeError, match="the log starts at version 1"):
        released_table(spec, spec.stage("table"), 1)


def test_delta_rs_reaches_a_bucket_with_the_stores_keys_and_commits_by_conditional_put() -> None:
    options = storage_options(S3Config(endpoint="http://s3.local:8333", access_key="a", secret_key="s"))
    assert options["conditional_put"] == "etag" and options["AWS_ALLOW_HTTP"] == "true"
    assert options["AWS_ENDPOINT_URL"] == "http://s3.local:8333" and options["aws_virtual_hosted_style_request"] == "false"
    aws = storage_options(S3Config(region="eu-west-1", path_style=False))
    assert "AWS_ENDPOINT_URL" not in aws and "AWS_ALLOW_HTTP" not in aws and aws["AWS_REGION"] == "eu-west-1"


def test_a_fresh_run_over_this_pipelines_steps_fails_by_default_and_touches_nothing(tmp_path: Path) -> None:
    barrier = _barrier(tmp_path)
    _commit(tmp_path / "t", barrier.app_id, 1)
    barrier.staging.put("step=2/part-00000.parquet", b"x")
    [problem] = prepare_outputs(_spec(tmp_path), tmp_path / "letters")
    assert problem.field == "spec.stages[1].sink.existingOutput" and problem.gt_last == 1
    assert f"table {tmp_path / 't'} already holds output (steps up to 1)" in str(problem)
    assert barrier.staging.list() == ["step=2/part-00000.parquet"] and DeltaTable(str(tmp_path / "t")).version() == 0


@pytest.mark.parametrize("policy,table_left", [("overwrite", False), ("resume", True), (None, True)])
def test_a_fresh_run_drops_staged_parts_no_release_took_and_overwrite_drops_the_table(
        tmp_path: Path, policy: str | None, table_left: bool) -> None:
    barrier = _barrier(tmp_path, policy)
    _commit(tmp_path / "t", "someone-else" if policy is None else barrier.app_id, 1)
    barrier.staging.put("step=2/part-00000.parquet", b"x")
    assert prepare_outputs(_spec(tmp_path, policy), tmp_path / "letters") == []
    assert barrier.staging.list() == [], "a crashed run's parts are never visible, and not this run's"
    assert (tmp_path / "t" / "_delta_log").exists() == table_left


def test_a_spark_session_gets_deltas_jars_only_when_its_settings_name_deltas_extension() -> None:
    assert wants_delta(SPARK_SETTINGS)
    assert wants_delta({"spark.sql.extensions": "a.B," + SPARK_SETTINGS["spark.sql.extensions"]})
    assert not wants_delta({"spark.x": "1"})
