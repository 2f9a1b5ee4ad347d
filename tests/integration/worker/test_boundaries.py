"""A worker's listeners refuse whoever is not its pipeline's, and what is not theirs to ask.

A real sidecar process (``python -m ftpipeline.worker.server``) with its
pipeline's credentials and a real Redis. Each test tries to cross a
boundary and then checks that nothing changed: the worker still answers its
coordinator with the same state, holds the same objects, and the pipeline's
Redis keys are as they were.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.flight as flight
import pytest
import redis

from ftpipeline.control.store import RunStore
from ftpipeline.lineage.naming import Task, TaskKind, WorkerId
from ftpipeline.worker import tls
from ftpipeline.worker.transport import SidecarClient, Unreachable

PIPELINE = """
apiVersion: ftpipeline.io/v1alpha1
kind: FTPipeline
metadata: {name: guarded}
spec:
  image: x
  entryPoint: fns.py
  workers: 1
  redis: {url: "redis://:secret-password@redis.example:6379/0"}
  stages:
    - {name: events, source: {generator: {function: events, rowsPerStep: 10}}}
    - {name: out, inputs: [{stage: events}], sink: {parquet: {path: out}}}
"""


@dataclass
class Worker:
    address: str             # its network listener
    local: str               # its Spark process's socket
    credentials: tls.Credentials
    pipeline: str
    process: subprocess.Popen[bytes]
    r: redis.Redis

    def coordinator(self) -> SidecarClient:
        return SidecarClient(self.address, timeout_s=5, credentials=self.credentials)

    def keys(self) -> dict[bytes, Any]:
        return {k: self.r.dump(k) for k in self.r.scan_iter(f"*{self.pipeline}*")}


@pytest.fixture
def worker(tmp_path: Path, redis_url: str, pipeline_name: str) -> Iterator[Worker]:
    credentials = tls.generate(pipeline_name)
    tls_dir = credentials.write(tmp_path / "tls")
    work = tmp_path / "w0"
    work.mkdir()
    log = open(tmp_path / "sidecar.log", "ab")
    process = subprocess.Popen(
        [sys.executable, "-m", "ftpipeline.worker.server", "--worker-id", "w0", "--pipeline", pipeline_name,
         "--redis-url", redis_url, "--dir", str(work), "--tls-dir", str(tls_dir)],
        stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    r = redis.Redis.from_url(redis_url)
    deadline = time.monotonic() + 60
    while not (work / "sidecar.addr").exists():
        assert process.poll() is None, (tmp_path / "sidecar.log").read_text()
        assert time.monotonic() < deadline, "the sidecar did not start"
        time.sleep(0.05)
    address = RunStore(r, pipeline_name).address(WorkerId("w0"))
    assert address is not None
    w = Worker(address, (work / "sidecar.addr").read_text(), credentials, pipeline_name, process, r)
    (tmp_path / "fns.py").write_text("def events(ctx):\n    return None\n")
    w.coordinator().call("create", {"spec": PIPELINE, "base_dir": str(tmp_path), "committed": 0,
                                    "identity": pipeline_name})
    yield w
    process.kill()
    process.wait()
    log.close()
    r.close()


def _unchanged(w: Worker, before: tuple[Any, Any, Any]) -> None:
    assert w.process.poll() is None, "the worker is still running"
    assert _seen(w) == before


def _seen(w: Worker) -> tuple[Any, Any, Any]:
    client = w.coordinator()
    return client.call("state"), client.call("stats"), w.keys()


def test_a_caller_without_the_pipelines_certificate_is_refused_before_any_action(worker: Worker) -> None:
    before = _seen(worker)
    strangers = {
        "no credentials": SidecarClient(worker.address, timeout_s=5),
        "another pipeline's": SidecarClient(worker.address, timeout_s=5, credentials=tls.generate("other")),
    }
    for who, client in strangers.items():
        for action, body in (("shutdown", {}), ("task_done", {"task": {}, "outputs": []}), ("release", {"step": 1})):
            with pytest.raises(Unreachable):  # the handshake fails: the call never reaches an action
                client.call(action, body)
        with pytest.raises(flight.FlightUnavailableError):
            client.fetch("events.0.1.out.0.0")
        _unchanged(worker, before)


def test_the_network_listener_serves_only_the_coordinators_actions_and_object_names(worker: Worker) -> None:
    before = _seen(worker)
    client = worker.coordinator()
    for action in ("task_done", "hello", "next_task", "snapshot_done", "handle", "__init__", "_do_shutdown"):
        with pytest.raises(flight.FlightServerError, match="unknown action"):
            client.call(action, {"task": {}, "outputs": []})
    for name in ("../objects/x", "../../etc/passwd", "events.0.1.out.0.0/../../x", "/etc/hostname",
                 "events.0.1.out.0", "Events.0.1.out.0.0", "events.-1.1.out.0.0"):
        with pytest.raises(flight.FlightServerError, match="not an object name"):
            client.fetch(name)
    with pytest.raises(flight.FlightServerError, match="not held"):  # a well-formed name passes the check
        client.fetch("events.0.1.out.0.0")
    _unchanged(worker, before)


def test_the_spark_process_reaches_only_its_own_actions_and_only_its_own_files(worker: Worker) -> None:
    before = _seen(worker)
    spark = SidecarClient(worker.local, timeout_s=5)
    for action in ("shutdown", "create", "release", "open"):
        with pytest.raises(flight.FlightServerError, match="unknown action"):
            spark.call(action, {})
    with pytest.raises(flight.FlightServerError, match="not served"):
        spark.fetch("events.0.1.out.0.0")
    config = spark.call("hello", {"pid": os.getpid()})
    assert "secret-password" not in config["spec"] and "redis" not in config["spec"], "no control-plane endpoint"
    before = _seen(worker)  # hello announced the worker (the run's joined message): that is its job
    task = Task(TaskKind.SOURCE, "events", 0, 1, ranges=((0, 0, 10),)).to_json()
    for file in ("../../../etc/passwd", "/etc/hostname", "sub/x.arrow", ".events.0.1.0.arrow.1.tmp"):
        with pytest.raises(flight.FlightServerError, match="is not a file of"):
            spark.call("task_done", {"task": task, "rows_in": 10, "outputs": [["events.0.1.out.0.0", 10, file, -1]]})
    _unchanged(worker, before)
