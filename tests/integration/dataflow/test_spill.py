"""A large task through files: the same objects and sink parts as the collected path, and no result collected.

The first test runs one transform task twice in one real SparkSession, once
collected (``toArrow``) and once through files (``spark.maxInMemoryBytes:
0``), and compares what each wrote. The second runs the example pipeline
with ``ftpipeline run`` under a Spark driver that refuses any result over
1 MiB: with every task through files it completes and equals the oracle;
with the default limit the same run fails on its first collect, which shows
the limit bites.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import yaml

from ftpipeline.lineage.naming import Task, TaskKind
from ftpipeline.oracle import compare
from ftpipeline.spec import load_pipeline
from ftpipeline.spec.load import load_entry_module, parse_pipeline
from ftpipeline.worker.buffer import WHOLE, ObjectBuffer, write_ipc
from ftpipeline.worker.executor import TaskRunner

from ..pipelines import clickstream, run_cli

PIPELINE = """
apiVersion: ftpipeline.io/v1alpha1
kind: FTPipeline
metadata: {name: spill}
spec:
  image: x
  entryPoint: fns.py
  workers: 1
  stages:
    - {name: orders, source: {generator: {function: orders, rowsPerStep: 10}}}
    - {name: enrich, parallelism: 2, inputs: [{stage: orders, partition: hash, keys: [user_id]}], transform: {function: enrich}}
    - name: per-user
      parallelism: 3
      inputs: [{stage: enrich, partition: hash, keys: [user_id]}]
      aggregate: {keyBy: [user_id], aggregations: [{name: n, op: count}]}
    - {name: totals, parallelism: 3, inputs: [{stage: per-user}], sink: {parquet: {path: totals}}}
    - {name: shape, parallelism: 2, inputs: [{stage: orders, partition: hash, keys: [user_id]}], transform: {function: enrich}}
    - {name: raw, parallelism: 2, inputs: [{stage: shape}], sink: {parquet: {path: raw}}}
"""

FUNCTIONS = """
from pyspark.sql import functions as F


def orders(ctx):
    return None


def enrich(df):
    return df.filter(F.col("amount") >= 1.0).withColumn("big", F.col("amount") > 50.0)
"""

ROWS = 150_000  # over two of the file path's read batches


def _orders() -> pa.Table:
    i = pa.array(range(ROWS), pa.int64())
    base = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    return pa.table({
        "user_id": pc.binary_join_element_wise("u", pc.cast(pc.bit_wise_and(i, 1023), pa.string()), ""),
        "amount": pc.divide(pc.cast(pc.bit_wise_and(i, 127), pa.float64()), 1.0),
        "n": i,
        "ok": pc.equal(pc.bit_wise_and(i, 3), 0),
        "at": pa.array([base + dt.timedelta(seconds=s) for s in range(ROWS)], pa.timestamp("us", tz="UTC")),
        "day": pa.array([dt.date(2026, 1, 1) + dt.timedelta(days=s % 300) for s in range(ROWS)], pa.date32()),
    })


def _runner(spark: Any, directory: Path, limit: int) -> TaskRunner:
    directory.mkdir()
    (directory / "fns.py").write_text(FUNCTIONS)
    spec = dataclasses.replace(parse_pipeline(PIPELINE, directory), max_in_memory_bytes=limit)
    buffer = ObjectBuffer(directory / "buffer")
    buffer.reset()
    return TaskRunner(spark, spec, load_entry_module(spec.entry_point, spec.base_dir), buffer)


def _ordered(table: pa.Table) -> pa.Table:
    return table.sort_by([("n", "ascending")])


def test_a_task_through_files_writes_what_the_collected_task_writes(spark: Any, tmp_path: Path) -> None:
    source = tmp_path / "orders.arrow"
    write_ipc(source, _orders())
    inputs = [["orders.0.1.enrich.1.0", str(source), WHOLE]]
    collected, through = _runner(spark, tmp_path / "collected", 1 << 40), _runner(spark, tmp_path / "files", 0)

    results = {}
    for name, runner in (("collected", collected), ("files", through)):
        for stage in ("enrich", "shape"):
            results[name, stage] = runner.run(Task(TaskKind.TRANSFORM, stage, 0, 1), inputs)
            runner.buffer.index(results[name, stage]["outputs"])  # as the sidecar does on task_done

    objects = {r: {o[0]: o for o in results[r, "enrich"]["outputs"]} for r in ("collected", "files")}
    assert sorted(objects["collected"]) == sorted(objects["files"]) and len(objects["files"]) == 3
    assert all(o[3] == WHOLE for o in objects["files"].values()), "through files: each object a file of its own"
    assert all(o[3] != WHOLE for o in objects["collected"].values()), "collected: one bundle"
    total = 0
    for name in objects["files"]:
        assert objects["files"][name][1] == objects["collected"][name][1], name
        want, got = collected.buffer.read(name), through.buffer.read(name)
        assert want is not None and got is not None
        assert got.schema == want.schema, name
        assert _ordered(got).equals(_ordered(want)), name
        total += got.num_rows
    assert 0 < total < ROWS, "the function ran: it filters"
    staged = [pq.read_table(tmp_path / r / "raw" / "_staging" / "step=1" / "part-00000.parquet") for r in ("collected", "files")]
    assert staged[1].schema == staged[0].schema
    assert _ordered(staged[1]).equals(_ordered(staged[0])) and staged[0].num_rows == total
    assert not any((tmp_path / "files" / "buffer" / "results").iterdir()), "Spark's result files are removed"
    assert spark.conf.get("spark.sql.adaptive.enabled") == "false", "the task's settings are restored"


def test_with_every_task_through_files_a_run_needs_no_result_collected(tmp_path: Path, redis_url: str, spark: Any) -> None:
    def pipeline(name: str, limit: int | None) -> Path:
        path = clickstream(tmp_path / name, name, steps=3, workers=1, rows_per_step=40_000,  # ~3 MB a step
                           parallelism={"events": 1, "clean": 1, "per-user": 1, "output": 1})
        doc = yaml.safe_load(path.read_text())
        doc["spec"]["spark"] = {"conf": {"spark.driver.maxResultSize": "1m"}}
        if limit is not None:
            doc["spec"]["spark"]["maxInMemoryBytes"] = limit
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        return path

    (tmp_path / "files").mkdir()
    (tmp_path / "collected").mkdir()
    files = pipeline("files", 0)
    run = run_cli(files, tmp_path / "files" / "run", "--redis-url", redis_url)
    assert run.code == 0, run.output
    assert run.summary["committed"] == 3
    [result] = compare(spark, load_pipeline(files), 3)
    assert result.equal, result

    collected = pipeline("collected", None)
    refused = run_cli(collected, tmp_path / "collected" / "run", "--redis-url", redis_url, timeout_s=300)
    assert refused.code != 0, "a collected step over spark.driver.maxResultSize must fail: else this test proves nothing"
    assert "maxResultSize" in refused.output, refused.output[-3000:]
