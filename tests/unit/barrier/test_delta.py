"""A Delta sink's released steps, read from the table's transactions (delta-rs, no JVM): GT_last, the version
that holds a step, and what a fresh run does with a table this pipeline or someone else wrote."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

from ftpipeline.barrier.delta import DeltaBarrier, spark_settings, transaction_version, version_of_step, wants_delta
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


def test_the_version_holding_a_step_is_found_among_other_writers_commits(tmp_path: Path) -> None:
    table, app = tmp_path / "t", "pipe-table"
    assert version_of_step(table, app, 1) is None
    _commit(table, "other", 1)        # v0
    _commit(table, app, 1)            # v1
    _commit(table, None, 0)           # v2: a plain append
    _commit(table, app, 2)            # v3
    _commit(table, app, 3)            # v4
    assert [version_of_step(table, app, s) for s in (1, 2, 3, 9)] == [2, 3, 4, 4]
    assert version_of_step(table, app, 0) == 0  # before its first step: the versions without any of it
    assert transaction_version(table, app, version=1) == 1
    assert DeltaTable(str(table), version=version_of_step(table, app, 2)).to_pyarrow_table().num_rows == 8


def test_a_fresh_run_over_this_pipelines_steps_fails_by_default_and_touches_nothing(tmp_path: Path) -> None:
    barrier = _barrier(tmp_path)
    _commit(tmp_path / "t", barrier.app_id, 1)
    (barrier.staging / "step=2").mkdir(parents=True)
    [problem] = prepare_outputs(_spec(tmp_path), tmp_path / "letters")
    assert problem.field == "spec.stages[1].sink.existingOutput" and problem.gt_last == 1
    assert f"table {tmp_path / 't'} already holds output (steps up to 1)" in str(problem)
    assert (barrier.staging / "step=2").exists() and DeltaTable(str(tmp_path / "t")).version() == 0


@pytest.mark.parametrize("policy,table_left", [("overwrite", False), ("resume", True), (None, True)])
def test_a_fresh_run_drops_staged_parts_no_release_took_and_overwrite_drops_the_table(
        tmp_path: Path, policy: str | None, table_left: bool) -> None:
    barrier = _barrier(tmp_path, policy)
    _commit(tmp_path / "t", "someone-else" if policy is None else barrier.app_id, 1)
    (barrier.staging / "step=2").mkdir(parents=True)
    assert prepare_outputs(_spec(tmp_path, policy), tmp_path / "letters") == []
    assert not barrier.staging.exists(), "a crashed run's parts are never visible, and not this run's"
    assert (tmp_path / "t" / "_delta_log").exists() == table_left


def test_delta_settings_are_added_only_for_a_pipeline_with_a_delta_sink_and_never_replace_the_users() -> None:
    assert spark_settings({"spark.x": "1"}, delta=False) == {"spark.x": "1"}
    settings = spark_settings({"spark.databricks.delta.snapshotPartitions": "8"}, delta=True)
    assert wants_delta(settings) and settings["spark.databricks.delta.snapshotPartitions"] == "8"
    assert not wants_delta({"spark.x": "1"})
