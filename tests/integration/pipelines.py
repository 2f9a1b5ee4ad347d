"""Build pipeline files for tests and run them through the real CLI."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ftpipeline.objectstore.base import ObjectStore

from ..rotation import FULL

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "clickstream"


def sampled(cases: list[Any], sample: list[Any]) -> list[Any]:
    """The cases a test runs: ``sample`` (chosen to cover every value of every dimension), or all with
    FTPIPELINE_TEST_FULL=1; which of the sample a run executes is ``tests/rotation.py``'s."""
    assert all(c in cases for c in sample), "a sampled case is not in the matrix"
    return cases if FULL else sample


def clickstream(
    directory: Path,
    name: str,
    *,
    steps: int = 20,
    workers: int = 3,
    rows_per_step: int = 9000,
    parallelism: dict[str, int] | None = None,
    fault_tolerance: bool = True,
    checkpoint_every: int | None = 0,
    retain: int = 2,
    mode: str = "lockstep",
    window: int = 3,
    strategy: str = "lineage",
    restart_budget: dict[str, int] | None = None,
    heartbeat_ms: int | None = None,
    ttl_steps: int = 0,
    state_backend: str | None = None,
    event_window: dict[str, Any] | None = None,
    checkpoint_storage: str | None = None,
    sink_path: str | None = None,
) -> Path:
    """The example pipeline with test-sized knobs, writing into ``directory``."""
    doc = yaml.safe_load((EXAMPLE / "pipeline.yaml").read_text())
    doc["metadata"]["name"] = name
    spec = doc["spec"]
    spec["entryPoint"] = str(EXAMPLE / "clickstream.py")
    spec["workers"] = workers
    spec["steps"]["maxSteps"] = steps
    spec["faultTolerance"] = fault_tolerance
    spec["steps"]["mode"] = mode
    if mode == "pipelined":
        spec["steps"]["window"] = window
    spec["recovery"] = {"strategy": strategy}
    if restart_budget is not None:
        spec["recovery"]["restartBudget"] = restart_budget
    if heartbeat_ms is not None:
        spec["recovery"]["heartbeatTimeoutMs"] = heartbeat_ms
    if checkpoint_every is not None:  # 0: off (the tests written for lineage alone); None: the default
        spec["checkpoint"] = {"intervalSteps": checkpoint_every, "retain": retain,
                              "storage": {"path": checkpoint_storage or str(directory / "checkpoints")}}
    if state_backend is not None:
        spec["state"] = {"backend": state_backend}
    for stage in spec["stages"]:
        stage["parallelism"] = (parallelism or {}).get(stage["name"], stage["parallelism"])
        if "aggregate" in stage and ttl_steps:
            stage["aggregate"]["ttl"] = {"steps": ttl_steps}
        if "aggregate" in stage and event_window is not None:  # event-time windows on the events' ts_ms
            stage["aggregate"]["window"] = event_window
        if "source" in stage and event_window is not None:
            stage["source"]["eventTime"] = {"column": "ts_ms", "watermark": {"maxOutOfOrderness": "1s"}}
        if "source" in stage:
            stage["source"]["generator"]["rowsPerStep"] = rows_per_step
        if "sink" in stage:
            stage["sink"]["parquet"]["path"] = sink_path or str(directory / "out")
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


KAFKA_EXAMPLE = ROOT / "examples" / "kafka-clickstream"


def _kafka_example(pipeline: Path, entry: Path, directory: Path, name: str, bootstrap: str, workers: int,
                   checkpoint_every: int, strategy: str) -> dict[str, Any]:
    """A Kafka example's document with a test's name, broker, checkpoints and dead letters under ``directory``."""
    doc = yaml.safe_load(pipeline.read_text())
    doc["metadata"]["name"] = name
    spec = doc["spec"]
    spec["entryPoint"] = str(entry)
    spec["workers"] = workers
    spec["kafka"] = {"bootstrapServers": bootstrap}
    spec["recovery"] = {"strategy": strategy}
    spec["checkpoint"] = {"intervalSteps": checkpoint_every, "storage": {"path": str(directory / "checkpoints")}}
    spec["deadLetter"] = {"path": str(directory / "dead-letters")}
    return doc  # type: ignore[no-any-return]


def _written(doc: dict[str, Any], directory: Path, name: str, events: Path, records: int) -> tuple[Path, Path]:
    """The pipeline file, and the first ``records`` of an example's events as the input for ``--produce``."""
    import gzip

    data = directory / events.name.removesuffix(".gz")
    data.write_bytes(b"\n".join(gzip.decompress(events.read_bytes()).splitlines()[:records]) + b"\n")
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path, data


def crashed_and_resumed(pipeline: Path, run_dir: Path, *first: str) -> CliRun:
    """A run whose coordinator crashes after committing step 4, then ``--resume --verify``, verified."""
    from ftpipeline.obs.crash import CRASH_EXIT

    crashed = run_cli(pipeline, run_dir, *first, env={"FTPIPELINE_CRASH_AFTER": "step-committed:4"})
    assert crashed.code == CRASH_EXIT, crashed.output[-3000:]
    resumed = run_cli(pipeline, run_dir, "--resume", "--verify")
    assert resumed.code == 0, resumed.output[-4000:]
    verified(resumed.output, resumed.summary)
    return resumed


def killed_and_recovered(pipeline: Path, run_dir: Path, redis_url: str, step: int, strategy: str, last: int,
                         after_tasks: int = 2) -> CliRun:
    """A run whose worker is killed at ``step`` (after ``after_tasks`` of its tasks), recovered once with
    ``strategy``, that commits every step through ``last``."""
    run = run_cli(pipeline, run_dir, "--redis-url", redis_url, "--kill-at-step", str(step),
                  "--kill-after-tasks", str(after_tasks), "--seed", "41")
    assert run.code == 0, run.output[-4000:]
    assert run.summary["committed"] == last
    [recovery] = run.summary["recoveries"]
    assert recovery["strategy"] == strategy, recovery
    return run


def rescaled_and_resumed(pipeline: Path, run_dir: Path, first_stage: int, last: int, parallelism: int = 3) -> CliRun:
    """A run cut short by its ``maxSteps``, then resumed with every stage from ``first_stage`` at
    ``parallelism`` (as many workers) and no step limit, ``--verify``: verified, every step through ``last``."""
    first = run_cli(pipeline, run_dir)
    assert first.code == 0, first.output[-3000:]
    doc = yaml.safe_load(pipeline.read_text())
    steps = doc["spec"]["steps"]
    steps.pop("maxSteps")
    if not steps:
        del doc["spec"]["steps"]
    doc["spec"]["workers"] = parallelism
    for stage in doc["spec"]["stages"][first_stage:]:
        stage["parallelism"] = parallelism
    pipeline.write_text(yaml.safe_dump(doc, sort_keys=False))
    resumed = run_cli(pipeline, run_dir, "--resume", "--verify")
    assert resumed.code == 0, resumed.output[-4000:]
    verified(resumed.output, resumed.summary)
    assert resumed.summary["committed"] == last
    return resumed


def run_history(pipeline: Path) -> ObjectStore:
    """Where ``ftpipeline run`` of ``pipeline`` keeps its step history (``control/history.py``)."""
    from ftpipeline.cli import run_identity
    from ftpipeline.control.history import history_store
    from ftpipeline.spec import load_pipeline

    spec = load_pipeline(pipeline)
    return history_store(dataclasses.replace(spec, identity=run_identity(spec.name, pipeline)))


def verified(output: str, summary: dict[str, object]) -> None:
    """``--verify`` ran and every comparison is equal: nothing lost, nothing twice."""
    verdicts = summary.get("verify")
    assert isinstance(verdicts, list) and verdicts, output
    for v in verdicts:  # the batch truth of a run with late records may differ (by those records)
        assert (v["equal"] and v["duplicates"] == 0 and v["missing"] == 0) or not v["binding"], (v, output[-3000:])


def kafka_clickstream(directory: Path, name: str, bootstrap: str, *, records: int = 12_000, per_step: int = 1500,
                      workers: int = 2, checkpoint_every: int = 3, strategy: str = "lineage",
                      steps: int | None = None) -> tuple[Path, Path]:
    """The Kafka example against ``bootstrap``, with topics of its own (``<name>-clicks``, ``<name>-totals``,
    created here) and test-sized knobs; the pipeline file and the input file for ``--produce``."""
    from ftpipeline.kafka.topics import create_topics

    doc = _kafka_example(KAFKA_EXAMPLE / "pipeline.yaml", KAFKA_EXAMPLE / "clickstream.py", directory, name,
                         bootstrap, workers, checkpoint_every, strategy)
    spec = doc["spec"]
    if steps is not None:  # a topic that never ends: stop after this many steps
        spec["steps"] = {"maxSteps": steps}
    for stage in spec["stages"]:
        if "source" in stage:
            stage["source"]["kafka"]["topic"] = f"{name}-clicks"
            stage["source"]["kafka"]["maxRecordsPerStep"] = per_step
            if steps is not None:
                del stage["source"]["kafka"]["endingOffsets"]
        if "sink" in stage:
            stage["sink"]["kafka"]["topic"] = f"{name}-totals"
    create_topics(bootstrap, {f"{name}-clicks": 3, f"{name}-totals": 2})
    return _written(doc, directory, name, KAFKA_EXAMPLE / "clicks.jsonl.gz", records)


DELTA_EXAMPLE = ROOT / "examples" / "kafka-orders-delta"


def kafka_orders_delta(directory: Path, name: str, bootstrap: str, *, records: int = 6_000, per_step: int = 1000,
                       workers: int = 2, checkpoint_every: int = 3, strategy: str = "lineage") -> tuple[Path, Path]:
    """The Kafka -> Delta example against ``bootstrap``, with a topic of its own (``<name>-orders``, created
    here), its table under ``directory`` and test-sized knobs; the pipeline file and the input for ``--produce``."""
    from ftpipeline.kafka.topics import create_topics

    doc = _kafka_example(DELTA_EXAMPLE / "pipeline.yaml", DELTA_EXAMPLE / "orders.py", directory, name, bootstrap,
                         workers, checkpoint_every, strategy)
    for stage in doc["spec"]["stages"]:
        if "source" in stage:
            stage["source"]["kafka"]["topic"] = f"{name}-orders"
            stage["source"]["kafka"]["maxRecordsPerStep"] = per_step
        if "sink" in stage:
            stage["sink"]["delta"]["path"] = str(directory / "table")
    create_topics(bootstrap, {f"{name}-orders": 3})
    return _written(doc, directory, name, DELTA_EXAMPLE / "orders.jsonl.gz", records)


@dataclass
class CliRun:
    code: int
    output: str
    summary: dict[str, Any]
    run_dir: Path


def identity_of(pipeline: Path) -> str:
    """The key ``ftpipeline run`` gives this pipeline file's Redis keys, znodes and checkpoint sub-path."""
    from ftpipeline.cli import run_identity

    return run_identity(yaml.safe_load(pipeline.read_text())["metadata"]["name"], pipeline)


# The test session's servers (``--redis-url``, ``--zookeeper``: set by ``conftest.py``), which a run uses unless it
# names its own or asks for private ones: a ZooKeeper JVM less for each run that does not break them.
SHARED: dict[str, str] = {}


def run_cli(pipeline: Path, run_dir: Path, *args: str, timeout_s: float = 900, env: dict[str, str] | None = None,
            private: bool = False) -> CliRun:
    """``ftpipeline run`` as a subprocess, on the session's Redis and ZooKeeper where ``args`` names none; with
    ``private``, on servers of its own, as a user who configures none runs it."""
    summary = run_dir / "summary.json"
    shared = [] if private else [x for flag, value in SHARED.items() if flag not in args for x in (flag, value)]
    cmd = [sys.executable, "-m", "ftpipeline.cli", "run", str(pipeline), "--no-progress",
           "--run-dir", str(run_dir), "--summary-json", str(summary), *args, *shared]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=run_dir.parent,
                            env={**os.environ, **(env or {})})
    try:
        output = proc.communicate(timeout=timeout_s)[0]
    except subprocess.TimeoutExpired:  # stuck: its threads' stacks say where, then it is killed
        proc.send_signal(signal.SIGUSR2)
        time.sleep(2)
        proc.kill()
        stacks = run_dir / "stacks.txt"
        output = (proc.communicate()[0] + f"\nno end within {timeout_s:.0f} s; the run's threads then:\n"
                  + (stacks.read_text()[-6000:] if stacks.exists() else "(no stacks.txt)"))
    data = json.loads(summary.read_text()) if summary.exists() else {}
    return CliRun(proc.returncode, output, data, run_dir)
