"""A stream joined to a table that changes while it runs (a ``lookup`` stage over a Delta table another writer
commits to every 100 milliseconds, or over a compacted Kafka topic written as often, with deletions and a
record that is no row), through a killed worker: the output equals each step's rows joined, in Spark, to
the table at the version the step recorded, read from the table's log or with a plain consumer
(``oracle/lookup.py``); so a re-run task joined the version its step had, not the newest. And a Parquet
table that changes under a running pipeline fails it, naming the directory."""

from __future__ import annotations

import json
import random
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from ..eventtime.test_windows import checked
from ..pipelines import killed_and_recovered, run_cli

CLICKS, PER_STEP = 1500, 100
LAST = CLICKS // PER_STEP


def ads(version: int) -> pa.Table:
    """The table's rows at one of its writer's versions: bids move, and an ad joins now and then."""
    rng = random.Random(version)
    n = 20 + version // 3
    return pa.table({"ad": [f"ad{i}" for i in range(n)], "campaign": [f"c{i % 4}" for i in range(n)],
                     "bid": [rng.randrange(1, 100) for _ in range(n)]})


def pipeline(directory: Path, name: str, table: dict[str, Any], kind: str = "left") -> Path:
    rng = random.Random(5)
    clicks = directory / "clicks"
    clicks.mkdir()
    rows = [{"ad": f"ad{rng.randrange(30)}", "user": f"u{rng.randrange(100)}", "n": i} for i in range(CLICKS)]
    (clicks / "clicks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (directory / "entry.py").write_text('"""No functions: the pipeline is declared whole."""\n')
    doc = {"apiVersion": "ftpipeline.io/v1alpha1", "kind": "FTPipeline", "metadata": {"name": name}, "spec": {
        "entryPoint": str(directory / "entry.py"), "workers": 2,
        "steps": {"trigger": {"timerMs": 250}},
        "checkpoint": {"intervalSteps": 4, "storage": {"path": str(directory / "checkpoints")}},
        "deadLetter": {"path": str(directory / "dead-letters")},
        "stages": [
            {"name": "clicks", "source": {"file": {
                "path": str(clicks), "format": "jsonl", "rowsPerStep": PER_STEP,
                "schema": {"ad": "string", "user": "string", "n": "long"}}}},
            {"name": "priced", "parallelism": 2, "inputs": [{"stage": "clicks", "partition": "hash", "keys": ["user"]}],
             "lookup": {"table": table, "keys": ["ad"], "type": kind}},
            {"name": "out", "parallelism": 2, "inputs": [{"stage": "priced"}],
             "sink": {"parquet": {"path": str(directory / "out")}}},
        ]}}
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def versions_joined(spark: Any, path: Path, tmp_path: Path) -> set[Any]:
    """The run's output checked against the oracle; the table's versions its steps recorded, more than three
    (the table changed under the run: steps joined different versions)."""
    checked(spark, path, tmp_path / "run", LAST, ())
    history = [json.loads(line) for f in (tmp_path / "checkpoints").rglob("history/*.jsonl")
               for line in f.read_text().splitlines()]
    versions = {d["tables"]["priced"] for d in history}
    assert len(versions) > 3, versions
    return versions


@pytest.mark.parametrize("kind", ["left", "inner"])
def test_a_delta_table_changing_mid_run_is_joined_at_each_steps_version(tmp_path: Path, redis_url: str, spark: Any,
                                                                        kind: str) -> None:
    from deltalake import write_deltalake

    table = tmp_path / "ads"
    write_deltalake(str(table), ads(0))
    done = threading.Event()

    def writer() -> None:  # another job's commits: a version every 100 ms while the pipeline runs (its steps
        version = 1       # take about as long: at every 300 ms a run saw 3 versions)
        while not done.wait(0.1):
            write_deltalake(str(table), ads(version), mode="overwrite")
            version += 1

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    try:
        path = pipeline(tmp_path, f"lookup-{kind}", {"delta": {"path": str(table)}}, kind)
        killed_and_recovered(path, tmp_path / "run", redis_url, 8, "lineage", LAST)
    finally:
        done.set()
        thread.join()
    versions_joined(spark, path, tmp_path)


def test_a_compacted_kafka_topic_changing_mid_run_is_joined_at_each_steps_ends(
        tmp_path: Path, redis_url: str, spark: Any, kafka_bootstrap: str, topic_name: str) -> None:
    from confluent_kafka import Producer

    from ftpipeline.kafka.client import config
    from ftpipeline.kafka.topics import create_topics

    create_topics(kafka_bootstrap, {topic_name: 2}, compacted=[topic_name])
    producer = Producer(config(kafka_bootstrap, **{"enable.idempotence": True, "linger.ms": 5}))

    def write(version: int) -> None:  # a version's rows, keyed by ad; every fifth version deletes an ad
        for row in ads(version).to_pylist():
            producer.produce(topic_name, key=row["ad"].encode(), value=json.dumps(row).encode())
        if version % 5 == 4:
            producer.produce(topic_name, key=f"ad{version % 20}".encode(), value=None)
        if version == 3:  # no row of the schema: it changes nothing (and is logged)
            producer.produce(topic_name, key=b"ad1", value=b"{not json")
        producer.flush(30)

    write(0)
    done = threading.Event()

    def writer() -> None:
        version = 1
        while not done.wait(0.1):
            write(version)
            version += 1

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    try:
        path = pipeline(tmp_path, "lookup-kafka", {"kafka": {"topic": topic_name, "schema": {
            "ad": "string", "campaign": "string", "bid": "long"}}}, "left")
        doc = yaml.safe_load(path.read_text())
        doc["spec"]["kafka"] = {"bootstrapServers": kafka_bootstrap}
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        killed_and_recovered(path, tmp_path / "run", redis_url, 8, "lineage", LAST)
    finally:
        done.set()
        thread.join()
    versions = versions_joined(spark, path, tmp_path)
    assert all(v.startswith("kafka:0=") and ",1=" in v for v in versions), versions


def test_a_parquet_table_that_changes_under_the_run_fails_it_naming_the_directory(tmp_path: Path) -> None:
    table = tmp_path / "ads"
    table.mkdir()
    pq.write_table(ads(0), table / "part-0.parquet")
    path = pipeline(tmp_path, "lookup-parquet", {"parquet": {"path": str(table)}})
    doc = yaml.safe_load(path.read_text())
    doc["spec"]["steps"]["maxSteps"] = 3
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    first = run_cli(path, tmp_path / "run", "--verify")
    assert first.code == 0, first.output[-3000:]
    assert "equals the oracle" in first.output
    pq.write_table(ads(1), table / "part-0.parquet")  # rewritten: another size
    doc["spec"]["steps"]["maxSteps"] = 6
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    resumed = run_cli(path, tmp_path / "run", "--resume")
    assert resumed.code != 0
    assert "lookup.table.parquet" in resumed.output and "changed since the step started" in resumed.output, \
        resumed.output[-3000:]


def test_a_workers_copy_of_a_kafka_table_reads_on_and_reads_again_for_a_step_behind(
        kafka_bootstrap: str, topic_name: str, caplog: pytest.LogCaptureFixture) -> None:
    from confluent_kafka import Producer

    from ftpipeline.dataflow.lookup_kafka import KafkaTable, TableEnds
    from ftpipeline.kafka.client import config
    from ftpipeline.kafka.topics import create_topics
    from ftpipeline.spec.model import KafkaSource

    create_topics(kafka_bootstrap, {topic_name: 1}, compacted=[topic_name])
    producer = Producer(config(kafka_bootstrap))
    topic = KafkaSource(topic_name, schema=(("ad", "string"), ("bid", "long")))
    looker = TableEnds(topic, kafka_bootstrap)

    def put(key: str, value: bytes | None) -> dict[int, int]:
        producer.produce(topic_name, key=key.encode(), value=value)
        producer.flush(30)
        return looker.ends()

    put("a", b'{"ad": "a", "bid": 1}')
    first = put("b", b'{"ad": "b", "bid": 2}')
    put("a", b'{"ad": "a", "bid": 3}')            # a newer value of a
    put("b", None)                                 # b deleted
    second = put("a", b'{"ad": "a", "bid": "x"}')  # no row of the schema: a stays at 3
    copy = KafkaTable("priced", topic, kafka_bootstrap)
    try:
        rows = lambda ends: sorted(map(tuple, (r.values() for r in copy.at(ends).to_pylist())))  # noqa: E731
        assert rows(first) == [("a", 1), ("b", 2)]
        assert rows(second) == [("a", 3)]          # read on from the first version's ends
        assert rows(first) == [("a", 1), ("b", 2)]  # a step behind: read again from the start
        assert rows({0: 0}) == [] and copy.at({0: 0}).schema.names == ["ad", "bid"]
    finally:
        copy.close()
        looker.close()
    assert any(getattr(r, "record", "") == f"{topic_name}/0@4" for r in caplog.records), caplog.records


def test_a_lookup_topic_that_does_not_exist_fails_validate_naming_the_field(tmp_path: Path,
                                                                            kafka_bootstrap: str) -> None:
    import subprocess
    import sys

    path = pipeline(tmp_path, "lookup-missing", {"kafka": {"topic": "no-such-ads", "schema": {"ad": "string"}}})
    doc = yaml.safe_load(path.read_text())
    doc["spec"]["kafka"] = {"bootstrapServers": kafka_bootstrap}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    checked = subprocess.run([sys.executable, "-m", "ftpipeline.cli", "validate", str(path)],
                             capture_output=True, text=True, timeout=120)
    wanted = "spec.stages[1].lookup.table.kafka.topic: topic 'no-such-ads' does not exist on"
    assert checked.returncode == 2 and wanted in " ".join(checked.stdout.split()), checked.stdout + checked.stderr
