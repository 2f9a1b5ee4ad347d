"""Kafka in, Kafka out, exactly once, through the real CLI: workers, the coordinator and a release killed.

Each run reads a topic of the example's click events on a real broker and
writes per-user totals to another topic in transactions; ``--verify`` reads
the output as a downstream consumer would (read_committed) and compares it
row for row with a plain PySpark batch job over the same records: equal
means nothing lost and nothing twice.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewPartitions

from ftpipeline.control import history as step_history
from tests.integration.pipelines import crashed_and_resumed, kafka_clickstream, run_cli, run_history, verified

# (name, extra arguments, environment, recovery strategy): five seeded faults and a run without any
CASES = [
    ("clean", [], {}, "lineage"),
    ("worker", ["--kill-at-step", "3", "--seed", "1"], {}, "lineage"),
    ("rollback", ["--kill-at-step", "5", "--seed", "2"], {}, "checkpoint"),
    ("timed", ["--kill-after", "3", "--seed", "3"], {}, "lineage"),
    # the releasing worker dies with step 3's records of sink channel 0 in an open transaction
    ("in-commit", [], {"FTPIPELINE_CRASH_AFTER": "kafka-produced:5@w0"}, "lineage"),
    # a paused worker, declared lost, wakes up later and finds itself fenced off
    # (every task a Spark job: the pause lands while the victim runs one, coordinator/detection.py)
    ("zombie", ["--kill-at-step", "4", "--fault", "zombie", "--seed", "4", "--no-plan-reuse"], {}, "lineage"),
]


@pytest.mark.parametrize("name,args,env,strategy", CASES, ids=[c[0] for c in CASES])
def test_kafka_to_kafka_equals_the_oracle_whatever_is_killed(tmp_path: Path, kafka_bootstrap: str, name: str,
                                                             args: list[str], env: dict[str, str],
                                                             strategy: str) -> None:
    pipeline, data = kafka_clickstream(tmp_path, f"k{name}", kafka_bootstrap, strategy=strategy)
    topic = f"k{name}-clicks"
    run = run_cli(pipeline, tmp_path / "run", "--produce", f"{topic}={data}", "--verify", *args, env=env)
    assert run.code == 0, run.output[-4000:]
    verified(run.output, run.summary)
    if name != "clean":
        assert run.summary["recoveries"], run.output[-3000:]
    if name == "in-commit":
        assert "lost w0" in run.output


def test_a_coordinator_that_crashes_resumes_and_still_writes_each_step_once(tmp_path: Path,
                                                                           kafka_bootstrap: str) -> None:
    pipeline, data = kafka_clickstream(tmp_path, "kcoord", kafka_bootstrap)
    crashed_and_resumed(pipeline, tmp_path / "run", "--produce", f"kcoord-clicks={data}")


PER_STEP = 800


def test_partitions_added_while_it_runs_are_read_from_their_beginning(tmp_path: Path, kafka_bootstrap: str) -> None:
    steps = 20
    pipeline, data = kafka_clickstream(tmp_path, "kgrow", kafka_bootstrap, records=6000, per_step=PER_STEP,
                                       steps=steps)
    run_dir = tmp_path / "run"
    summary = run_dir / "summary.json"
    proc = subprocess.Popen([sys.executable, "-m", "ftpipeline.cli", "run", str(pipeline), "--no-progress",
                             "--run-dir", str(run_dir), "--produce", f"kgrow-clicks={data}", "--verify",
                             "--summary-json", str(summary)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path, env=os.environ)
    try:
        _grow_while_it_runs(proc, run_history(pipeline), kafka_bootstrap, data, steps)
        output = proc.communicate(timeout=600)[0]
    finally:
        proc.kill()
    assert proc.returncode == 0, output[-4000:]
    read = {slot: _read_from(run_history(pipeline), slot) for slot in ("clicks.3", "clicks.4")}
    assert all(n > 0 for n in read.values()), read
    verified(output, json.loads(summary.read_text()))


def _grow_while_it_runs(proc: subprocess.Popen[str], history: Path, bootstrap: str, data: Path, steps: int) -> None:
    """Once a few steps read the topic's three partitions, give it two more and write to those alone: to
    partition 4 until a step read from it, then to partition 3 until one did; then enough to all five for the
    run to reach its last step. Each channel lists the topic on its own clock: records written to both new
    partitions at once could carry the run to its end before the channel that owns one of them looked again."""
    deadline = time.monotonic() + 300
    while len(step_history.read(history)) < 3:
        assert proc.poll() is None, proc.communicate()[0][-3000:]
        assert time.monotonic() < deadline
        time.sleep(0.2)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_partitions([NewPartitions("kgrow-clicks", 5)]).values():
        future.result(30)
    events = [json.loads(line) for line in data.read_bytes().splitlines()
              if line.startswith(b"{") and b'"free"' not in line]
    producer = Producer({"bootstrap.servers": bootstrap})

    def produce(prefix: str, n: int, partitions: tuple[int, ...]) -> None:
        for i in range(n):
            event = dict(events[i % len(events)], event_id=f"{prefix}-{i}")
            producer.produce("kgrow-clicks", value=json.dumps(event).encode(), partition=partitions[i % len(partitions)])
        producer.flush(30)

    for partition in (4, 3):
        produce(f"late{partition}", 1500, (partition,))
        while not _read_from(history, f"clicks.{partition}"):
            assert proc.poll() is None, proc.communicate()[0][-3000:]
            assert time.monotonic() < deadline
            time.sleep(0.2)
    produce("rest", steps * PER_STEP, (0, 1, 2, 3, 4))


def _read_from(history: Path, slot: str) -> int:
    return sum(hi - lo for offsets in step_history.read(history).values() for s, (lo, hi) in offsets.items() if s == slot)


def test_a_broker_killed_and_restarted_mid_run_is_waited_for_and_the_output_equals_the_oracle(
        tmp_path: Path) -> None:
    from ftpipeline.embedded.kafka import EmbeddedKafka

    broker = EmbeddedKafka(tmp_path / "broker").start()
    try:
        pipeline, data = kafka_clickstream(tmp_path, "kbroker", broker.bootstrap, records=8000, per_step=800)
        run_dir = tmp_path / "run"
        summary = run_dir / "summary.json"
        proc = subprocess.Popen([sys.executable, "-m", "ftpipeline.cli", "run", str(pipeline), "--no-progress",
                                 "--run-dir", str(run_dir), "--produce", f"kbroker-clicks={data}", "--verify",
                                 "--summary-json", str(summary)],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path,
                                env=os.environ)
        try:
            deadline = time.monotonic() + 300
            while len(step_history.read(run_history(pipeline))) < 3:
                assert proc.poll() is None, proc.communicate()[0][-3000:]
                assert time.monotonic() < deadline
                time.sleep(0.1)
            broker.kill()
            time.sleep(8)
            broker.start()
            output = proc.communicate(timeout=600)[0]
        finally:
            proc.kill()
    finally:
        broker.stop()
    assert proc.returncode == 0, output[-4000:]
    verified(output, json.loads(summary.read_text()))


def test_a_topic_that_does_not_exist_fails_validate_and_run_at_once_naming_the_field(tmp_path: Path,
                                                                                   kafka_bootstrap: str) -> None:
    """A source topic misspelt: nothing would ever arrive, and the run would wait for ever. Both commands say
    so in seconds, naming the field and the topic; no worker starts and no topic is created."""
    import yaml

    pipeline, _ = kafka_clickstream(tmp_path, "kmissing", kafka_bootstrap)
    doc = yaml.safe_load(pipeline.read_text())
    doc["spec"]["stages"][0]["source"]["kafka"]["topic"] = "kmissing-clikcs"
    pipeline.write_text(yaml.safe_dump(doc))
    wanted = "spec.stages[0].source.kafka.topic: topic 'kmissing-clikcs' does not exist on"
    started = time.monotonic()
    checked = subprocess.run([sys.executable, "-m", "ftpipeline.cli", "validate", str(pipeline)],
                             capture_output=True, text=True, timeout=120)
    assert checked.returncode == 2 and wanted in " ".join(checked.stdout.split()), checked.stdout + checked.stderr
    assert "kmissing-clicks" in checked.stdout  # what the cluster has, for a misspelt name
    run = run_cli(pipeline, tmp_path / "run", timeout_s=120)
    assert run.code == 2 and wanted in " ".join(run.output.split()), run.output
    assert time.monotonic() - started < 60
    assert not (tmp_path / "run" / "workers").exists()
    topics = AdminClient({"bootstrap.servers": kafka_bootstrap}).list_topics(timeout=10).topics
    assert "kmissing-clikcs" not in topics
