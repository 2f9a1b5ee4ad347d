"""Kafka in, a Delta Lake table out, exactly once, through the real CLI: workers, the coordinator and a
release killed; on a volume and in a bucket of the real S3 server.

Each run reads a topic of the example's orders on a real broker, enriches
them with the static product table and appends each step to a Delta table
in one commit whose transaction version is the step. ``--verify`` reads the
table's log itself (no Delta library: ``oracle/delta.py``) and compares it
row for row with a plain PySpark batch job over the same records: equal
means nothing lost and nothing twice.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from ftpipeline.embedded.s3 import EmbeddedS3
from ftpipeline.objectstore.base import open_store
from tests.integration.pipelines import crashed_and_resumed, kafka_orders_delta, run_cli, verified

# (name, extra arguments, environment, recovery strategy): five seeded faults
CASES = [
    ("worker", ["--kill-at-step", "3", "--seed", "1"], {}, "lineage"),
    ("rollback", ["--kill-at-step", "5", "--seed", "2"], {}, "checkpoint"),
    # the releasing worker dies after step 4 is in the table and before the coordinator hears of it
    ("in-commit", [], {"FTPIPELINE_CRASH_AFTER": "delta-written:4@w0"}, "lineage"),
    # at a time rather than a step: most of a step is its commit, so the kill lands in one or between two
    ("timed", ["--kill-after", "6", "--seed", "3"], {}, "lineage"),
]


def _versions(table: Path | str, app_id_suffix: str) -> list[int]:
    """The transaction version of every commit of the table, in order (one per step, each once)."""
    log = open_store(table).child("_delta_log")
    found = []
    for commit in sorted(k for k in log.list() if k.endswith(".json")):
        for line in log.get(commit).decode().splitlines():
            action = json.loads(line)
            if "txn" in action and action["txn"]["appId"].endswith(app_id_suffix):
                found.append(int(action["txn"]["version"]))
    return found


@pytest.mark.parametrize("name,args,env,strategy", CASES, ids=[c[0] for c in CASES])
def test_kafka_to_delta_equals_the_oracle_whatever_is_killed(tmp_path: Path, kafka_bootstrap: str, name: str,
                                                             args: list[str], env: dict[str, str],
                                                             strategy: str) -> None:
    pipeline, data = kafka_orders_delta(tmp_path, f"d{name}", kafka_bootstrap, strategy=strategy)
    run = run_cli(pipeline, tmp_path / "run", "--produce", f"d{name}-orders={data}", "--verify", *args, env=env)
    assert run.code == 0, run.output[-4000:]
    verified(run.output, run.summary)
    assert run.summary["recoveries"], run.output[-3000:]
    steps = _versions(tmp_path / "table", "-table")
    assert steps == list(range(1, len(steps) + 1)) and len(steps) >= 6, ("one commit per step, none twice", steps)
    if name == "in-commit":
        assert "lost w0" in run.output


def test_a_table_in_a_bucket_through_a_release_killed_after_its_commit_and_a_rollback(
        tmp_path: Path, kafka_bootstrap: str, s3_server: EmbeddedS3, s3_bucket: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The table and the checkpoints in a bucket, the endpoint in the environment; the releasing worker dies
    after step 4's commit is in the bucket, and the run rolls back to its checkpoint and replays step 4: the
    commit of the replay finds it held."""
    pipeline, data = kafka_orders_delta(tmp_path, "ds3", kafka_bootstrap, strategy="checkpoint")
    doc = yaml.safe_load(pipeline.read_text())
    table = f"s3://{s3_bucket}/orders/table"
    doc["spec"]["stages"][-1]["sink"]["delta"]["path"] = table
    doc["spec"]["checkpoint"]["storage"] = {"path": f"s3://{s3_bucket}/checkpoints"}
    pipeline.write_text(yaml.safe_dump(doc, sort_keys=False))
    env = {**s3_server.config.to_env(), "FTPIPELINE_CRASH_AFTER": "delta-written:4@w0"}
    run = run_cli(pipeline, tmp_path / "run", "--produce", f"ds3-orders={data}", "--verify", env=env)
    assert run.code == 0, run.output[-4000:]
    verified(run.output, run.summary)
    assert run.summary["recoveries"] and "lost w0" in run.output, run.output[-3000:]
    assert "rolled back to" in " ".join(run.output.split()), run.output[-3000:]
    assert not (tmp_path / "table").exists() and not (tmp_path / "run" / "s3").exists(), "all in the bucket"
    for name, value in s3_server.config.to_env().items():
        monkeypatch.setenv(name, value)
    steps = _versions(table, "-table")
    assert steps == list(range(1, len(steps) + 1)) and len(steps) >= 6, ("one commit per step, none twice", steps)
    assert open_store(table).child("_ftpipeline_staging").list() == [], "every staged step released and dropped"


def test_a_coordinator_that_crashes_resumes_and_still_commits_each_step_once(tmp_path: Path,
                                                                            kafka_bootstrap: str) -> None:
    pipeline, data = kafka_orders_delta(tmp_path, "dcoord", kafka_bootstrap)
    crashed_and_resumed(pipeline, tmp_path / "run", "--produce", f"dcoord-orders={data}")
    steps = _versions(tmp_path / "table", "-table")
    assert steps == list(range(1, len(steps) + 1)), steps


def test_a_step_whose_schema_the_table_refuses_fails_the_run_naming_the_field_and_leaves_the_table(
        tmp_path: Path, kafka_bootstrap: str) -> None:
    """Schema evolution is off by default: a table made with other columns takes none of the run's steps."""
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    pipeline, data = kafka_orders_delta(tmp_path, "dschema", kafka_bootstrap, records=2000)
    write_deltalake(str(tmp_path / "table"), pa.table({"order_id": ["o-old"], "note": ["made by someone else"]}))
    before = DeltaTable(str(tmp_path / "table")).version()
    run = run_cli(pipeline, tmp_path / "run", "--produce", f"dschema-orders={data}")
    assert run.code != 0
    said = " ".join(run.output.split())  # as printed, wrapped to the terminal
    assert "sink.delta.mergeSchema" in said and "refuses step 1" in said, run.output[-3000:]
    assert "Traceback" not in run.output, run.output[-3000:]
    table = DeltaTable(str(tmp_path / "table"))
    assert table.version() == before and table.to_pyarrow_table().num_rows == 1, "nothing of the run is in it"


def test_with_merge_schema_a_step_adds_its_columns_to_a_table_someone_else_made(tmp_path: Path,
                                                                               kafka_bootstrap: str) -> None:
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    pipeline, data = kafka_orders_delta(tmp_path, "dmerge", kafka_bootstrap, records=2000)
    doc = yaml.safe_load(pipeline.read_text())
    doc["spec"]["stages"][-1]["sink"]["delta"].update({"mergeSchema": True, "partitionBy": []})
    pipeline.write_text(yaml.safe_dump(doc, sort_keys=False))
    write_deltalake(str(tmp_path / "table"), pa.table({"order_id": ["o-old"], "note": ["made by someone else"]}))
    run = run_cli(pipeline, tmp_path / "run", "--produce", f"dmerge-orders={data}")
    assert run.code == 0, run.output[-4000:]
    table = DeltaTable(str(tmp_path / "table"))
    rows = table.to_pyarrow_table()
    assert {"note", "amount_cents", "category"} <= set(rows.column_names), (
        rows.column_names, table.history(), sorted(p.name for p in (tmp_path / "table" / "_delta_log").iterdir()),
        run.output[-3000:])
    assert rows.num_rows == 1 + sum(1 for line in data.read_text().splitlines() if line.startswith('{"order_id":"'))
