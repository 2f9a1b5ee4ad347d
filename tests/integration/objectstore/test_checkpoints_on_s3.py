"""Checkpoints and output in a real S3 server: ``ftpipeline run`` with ``s3://`` checkpoint storage and Parquet
sinks, workers killed under both strategies and a coordinator restarted; output equal to the oracle (one plain
PySpark batch job), read through the sink's commits (``barrier/objects.py``).

Two ways to reach the store, as a user has them: no endpoint configured (the run starts a private server in
its run directory) and an endpoint in the environment (the session's shared server, as an external store).
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
import yaml

from ftpipeline.checkpoint.storage import CheckpointStorage
from ftpipeline.control import history
from ftpipeline.embedded.s3 import EmbeddedS3
from ftpipeline.objectstore.base import open_store
from ftpipeline.oracle import compare
from ftpipeline.spec import load_pipeline
from ftpipeline.state.backend import make_backend

from ..pipelines import ROOT, clickstream, crashed_and_resumed, identity_of, run_cli

PARALLELISM = {"events": 3, "clean": 3, "per-user": 2, "output": 2}
STEPS = 12


def test_a_private_server_holds_the_checkpoints_a_killed_worker_is_restored_from(
        tmp_path: Path, redis_url: str, zookeeper: str, spark: object, monkeypatch: pytest.MonkeyPatch) -> None:
    """No endpoint configured: the run starts its own server; a stateful channel is lost and the run rolls back to
    a cut of pipelined steps (its in-flight messages come back from the bucket too)."""
    pipeline = clickstream(tmp_path, "s3ck", steps=STEPS, rows_per_step=4000, parallelism=PARALLELISM,
                           checkpoint_every=3, mode="pipelined", strategy="checkpoint",
                           checkpoint_storage="s3://ckpt/runs", sink_path="s3://out/clicks")
    run = run_cli(pipeline, tmp_path / "run", "--redis-url", redis_url, "--zookeeper", zookeeper,
                  "--kill-at-step", "8", "--kill-worker", "w0", "--kill-after-tasks", "2")
    assert run.code == 0, run.output[-4000:]
    assert "a private S3 server" in run.output
    [recovery] = run.summary["recoveries"]
    assert recovery["strategy"] == "checkpoint"
    assert run.summary["checkpoints"]
    # what the run left in its buckets: its output, committed checkpoints with RocksDB's files, the step history
    with EmbeddedS3(tmp_path / "run" / "s3") as server:
        for name, value in server.config.to_env().items():
            monkeypatch.setenv(name, value)
        [result] = compare(spark, load_pipeline(pipeline), STEPS)
        assert result.duplicates == 0 and result.equal, result
        assert not (tmp_path / "out").exists()
        storage = CheckpointStorage("s3://ckpt/runs", identity_of(pipeline), server.config)
        assert storage.committed_epochs()
        assert any(k.startswith("shared/per-user.") for k in storage.store.list("shared/"))
        assert not (tmp_path / "checkpoints").exists()
        assert sorted(history.read(storage.store.child("history"))) == list(range(1, STEPS + 1))


def test_an_external_endpoint_and_lineage_recovery(tmp_path: Path, redis_url: str, zookeeper: str, spark: object,
                                                  s3_server: EmbeddedS3, s3_bucket: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The endpoint and keys in the environment, as a cluster's Secret gives them: the run starts no server."""
    pipeline = clickstream(tmp_path, "s3ext", steps=STEPS, rows_per_step=4000, parallelism=PARALLELISM,
                           checkpoint_every=2, strategy="lineage",
                           checkpoint_storage=f"s3://{s3_bucket}/pipelines", sink_path=f"s3://{s3_bucket}/out")
    run = run_cli(pipeline, tmp_path / "run", "--redis-url", redis_url, "--zookeeper", zookeeper,
                  "--kill-at-step", "7", "--kill-after-tasks", "3", env=s3_server.config.to_env())
    assert run.code == 0, run.output[-4000:]
    assert "private S3 server" not in run.output and not (tmp_path / "run" / "s3").exists()
    assert run.summary["recoveries"] and run.summary["checkpoints"]
    for name, value in s3_server.config.to_env().items():
        monkeypatch.setenv(name, value)
    [result] = compare(spark, load_pipeline(pipeline), STEPS)
    assert result.duplicates == 0 and result.equal, result
    storage = CheckpointStorage(f"s3://{s3_bucket}/pipelines", identity_of(pipeline), s3_server.config)
    assert len(storage.committed_epochs()) <= 2  # retain: the older ones were pruned from the bucket


def test_a_restarted_coordinator_resumes_from_the_bucket(tmp_path: Path, redis_url: str, zookeeper: str) -> None:
    """The coordinator crashes after step 4; ``--resume`` adopts the private server and the workers, and verifies."""
    pipeline = clickstream(tmp_path, "s3resume", steps=10, rows_per_step=3000, parallelism=PARALLELISM,
                           checkpoint_every=2, checkpoint_storage="s3://ckpt/runs", sink_path="s3://ckpt/out")
    resumed = crashed_and_resumed(pipeline, tmp_path / "run", "--redis-url", redis_url, "--zookeeper", zookeeper)
    assert resumed.summary["committed"] == 10


@pytest.mark.parametrize("backend", ["rocksdb", "memory"])
def test_a_snapshot_goes_up_and_comes_back_through_the_bucket(tmp_path: Path, s3_server: EmbeddedS3, s3_bucket: str,
                                                              backend: str) -> None:
    """Each state backend's snapshot, incremental for RocksDB: the second checkpoint uploads only new files."""
    storage = CheckpointStorage(f"s3://{s3_bucket}/p", "pipe", s3_server.config)
    states = make_backend(backend, tmp_path / "worker")
    schema = pa.schema([("user", pa.string()), ("n", pa.int64()), ("_step", pa.int64())])
    state = states.create("agg.0", schema, ["user"])
    state.put(pa.table({"user": [f"u{i}" for i in range(5000)], "n": [1] * 5000, "_step": [1] * 5000}, schema=schema))
    first = state.freeze(storage, 1, "agg.0", 1)()
    state.put(pa.table({"user": ["u1"], "n": [7], "_step": [2]}, schema=schema))
    second = state.freeze(storage, 2, "agg.0", 2)()
    if backend == "rocksdb":
        assert storage.shared_files(1) < storage.shared_files(2)
        assert storage.size_bytes(2) < storage.size_bytes(1)
    storage.prune({2})
    assert storage.store.list("epoch-1/") == []
    back = states.restore("agg.0", storage, second.path, ["user"], 2)
    assert back is not None
    rows = {r["user"]: r["n"] for b in back.scan() for r in pa.Table.from_batches([b]).to_pylist()}
    assert len(rows) == 5000 and rows["u1"] == 7 and rows["u2"] == 1
    assert first.rows == 5000
    for s in (state, back):
        s.close()


def test_dead_letters_and_output_of_a_file_source_in_a_bucket(tmp_path: Path) -> None:
    """The orders example (broken records among its input files) with its output, dead letters and checkpoints at
    s3:// URIs, a worker killed mid-run: ``--verify`` compares output and dead letters with the oracle."""
    example = ROOT / "examples" / "orders-files"
    doc = yaml.safe_load((example / "pipeline.yaml").read_text())
    doc["metadata"]["name"] = "s3orders"
    doc["spec"]["entryPoint"] = str(example / "orders.py")
    doc["spec"]["stages"][0]["source"]["file"]["path"] = str(example / "orders")
    doc["spec"]["stages"][-1]["sink"]["parquet"]["path"] = "s3://orders/out/per-country"
    doc["spec"]["deadLetter"] = {"path": "s3://orders/dead-letters"}
    doc["spec"]["checkpoint"] = {"intervalSteps": 2, "storage": {"path": "s3://orders/checkpoints"}}
    pipeline = tmp_path / "orders.yaml"
    pipeline.write_text(yaml.safe_dump(doc))
    run = run_cli(pipeline, tmp_path / "run", "--verify", "--kill-at-step", "3", "--kill-after-tasks", "1")
    assert run.code == 0, run.output[-4000:]
    verdicts = {v["what"]: v for v in run.summary["verify"]}
    assert all(v["equal"] for v in run.summary["verify"]), run.summary["verify"]
    assert verdicts["dead letters"]["actual_rows"] > 0, verdicts  # the example's broken records, kept in the bucket
    assert run.summary["recoveries"]
    with EmbeddedS3(tmp_path / "run" / "s3") as server:
        letters = open_store("s3://orders/dead-letters", server.config).list()
        assert letters and all(k.endswith(".jsonl") for k in letters)


def test_a_store_that_refuses_the_keys_is_an_error_naming_it_before_any_worker(
        tmp_path: Path, s3_server: EmbeddedS3, s3_bucket: str) -> None:
    pipeline = clickstream(tmp_path, "s3refused", steps=2, checkpoint_storage=f"s3://{s3_bucket}/c",
                           sink_path=f"s3://{s3_bucket}/out")
    wrong = {**s3_server.config.to_env(), "AWS_SECRET_ACCESS_KEY": "not-the-secret"}
    run = run_cli(pipeline, tmp_path / "run", env=wrong, timeout_s=120)
    assert run.code == 2, run.output[-3000:]
    assert "error: the pipeline's output storage:" in run.output and f"s3://{s3_bucket}/out" in run.output
    assert "Traceback" not in run.output
    assert not (tmp_path / "run" / "workers").exists()  # no worker was started


def test_windows_late_records_dedup_and_output_all_in_a_bucket(tmp_path: Path) -> None:
    """The page-views windows and deduplication with every location in a private bucket, a worker killed:
    ``--verify`` compares both sinks, both late-data outputs and the dead letters with the oracle."""
    from ..eventtime.test_windows import page_views

    pipeline = page_views(tmp_path, "s3windows", kind="sliding", emit="update", strategy="lineage")
    text = pipeline.read_text().replace(f"{tmp_path}/", "s3://views/")
    assert str(tmp_path) not in text
    pipeline.write_text(text)
    run = run_cli(pipeline, tmp_path / "run", "--verify", "--kill-at-step", "7", "--kill-after-tasks", "2")
    assert run.code == 0, run.output[-4000:]
    verdicts = run.summary["verify"]
    assert all(v["equal"] and v["duplicates"] == 0 for v in verdicts), verdicts
    late = [v for v in verdicts if v["what"] == "late data"]
    assert len(late) == 2 and all(v["actual_rows"] > 0 for v in late), late
    assert run.summary["recoveries"] and not any(p.name in ("out", "late", "unique") for p in tmp_path.iterdir())
