"""ZooKeeper, Redis or checkpoint storage out of reach mid-run costs time, not the run, and never a human.

Real servers, real workers, real faults: ZooKeeper cut off for 30 s through a
proxy; Redis killed without persistence so that it comes back empty. Each run pauses (a
log line, the outage in the summary), recovers by itself (no worker is
declared lost for a control-plane fault; an empty Redis is rebuilt by a
rollback) and its output equals the oracle. Checkpoint storage replaced by a
file aborts checkpoints, each with a reason naming the path, until it is back.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from ftpipeline.control.store import RunStore
from ftpipeline.embedded.redis import EmbeddedRedis
from ftpipeline.embedded.zookeeper import EmbeddedZooKeeper
from ftpipeline.oracle import compare
from ftpipeline.spec import load_pipeline

from ...chaos.proxy import TcpProxy
from ..pipelines import clickstream, identity_of

STEPS = 10
PARALLELISM = {"events": 2, "clean": 2, "per-user": 2, "output": 2}


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[tuple[EmbeddedZooKeeper, TcpProxy, EmbeddedRedis]]:
    """A ZooKeeper of this test's own behind a proxy (it is cut), and a Redis without persistence (killed)."""
    zk = EmbeddedZooKeeper(tmp_path / "zookeeper").start()
    proxy = TcpProxy(zk.port).start()
    r = EmbeddedRedis(tmp_path / "redis").start()
    yield zk, proxy, r
    proxy.stop()
    zk.stop()
    r.stop()


def _start(tmp_path: Path, pipeline: Path, proxy: TcpProxy, r: EmbeddedRedis, summary: Path) -> subprocess.Popen[str]:
    """``ftpipeline run`` against this test's servers (ZooKeeper through the proxy)."""
    return subprocess.Popen([sys.executable, "-m", "ftpipeline.cli", "run", str(pipeline), "--no-progress",
                             "--run-dir", str(tmp_path / "run"), "--redis-url", r.url, "--zookeeper", proxy.address,
                             "--summary-json", str(summary)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, cwd=tmp_path)


def _run_through(tmp_path: Path, servers: tuple[EmbeddedZooKeeper, TcpProxy, EmbeddedRedis], fault: str,
                 seconds: float, spark: object, checkpoint_every: int = 4) -> dict[str, Any]:
    _, proxy, r = servers
    component = fault.split("-")[0]
    pipeline = clickstream(tmp_path, fault, steps=STEPS, workers=2, rows_per_step=3000,
                           parallelism=PARALLELISM, checkpoint_every=checkpoint_every)
    summary = tmp_path / "summary.json"
    proc = _start(tmp_path, pipeline, proxy, r, summary)
    try:
        output = _break_and_wait(proc, RunStore(redis.Redis.from_url(r.url), identity_of(pipeline)), proxy, r, fault,
                                 seconds)
    finally:
        if proc.poll() is None:  # a failed assertion: the run must not outlive its test
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, output
    log = (tmp_path / "run" / "coordinator.log").read_text()
    assert f'"message": "control plane unavailable", "component": "{component}"' in log
    assert f'"message": "control plane available again", "component": "{component}"' in log
    result = json.loads(summary.read_text())
    assert result["committed"] == STEPS
    assert result["recoveries"] == [], result["recoveries"]  # an outage is not N worker deaths
    outages = [o for o in result["outages"] if o["component"] == component]
    assert outages, result["outages"]
    if fault != "redis-lost":
        assert outages[0]["seconds"] >= seconds * 0.8 and outages[0]["outcome"] == "resumed", outages
    [comparison] = compare(spark, load_pipeline(pipeline), STEPS)
    assert comparison.duplicates == 0 and comparison.equal, comparison
    # the terminal says so, and the summary counts each input row once whatever the outage did
    said = " ".join(output.replace("│", " ").split())
    assert f"{component} unreachable, the run is paused until it answers" in said, output
    assert f"{component} answers again after" in said, output
    assert result["source_rows"] == STEPS * 3000, result["source_rows"]
    assert f"rows read {STEPS * 3000:,}" in said and f"control-plane pauses {len(result['outages'])}" in said, output
    return result


def _break_and_wait(proc: subprocess.Popen[str], store: RunStore, proxy: TcpProxy, r: EmbeddedRedis, fault: str,
                    seconds: float) -> str:
    deadline = time.monotonic() + 300
    while store.committed() < 3 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    at = store.committed()
    assert proc.poll() is None and at >= 3, proc.communicate()[0]
    if fault == "zookeeper-cut":
        proxy.cut()
        time.sleep(seconds)
        assert store.committed() <= at + 1, "steps went on without the command log"
        proxy.restore()
    else:
        r.kill()
        time.sleep(seconds)
        r.start()
    return proc.communicate(timeout=600)[0]


def test_a_30_second_zookeeper_outage_pauses_the_run_and_it_finishes(
        tmp_path: Path, servers: tuple[EmbeddedZooKeeper, TcpProxy, EmbeddedRedis], spark: object) -> None:
    """Cut for 30 s, five times the workers' heartbeat timeout: every session expires."""
    _run_through(tmp_path, servers, "zookeeper-cut", 30, spark)


# A ZooKeeper killed and restarted, a Redis restarted with its data, and a Redis emptied under a run
# with checkpoints are in the chaos tier's fixed sample (tests/chaos/test_chaos.py), which checks the
# output against the oracle too.


def test_a_redis_that_comes_back_empty_is_rebuilt_even_without_a_checkpoint(
        tmp_path: Path, servers: tuple[EmbeddedZooKeeper, TcpProxy, EmbeddedRedis], spark: object) -> None:
    """Killed without persistence: it comes back with nothing. With no checkpoint to roll back to, the
    run replays from step 1, the sinks dropping what they already released, and goes on."""
    result = _run_through(tmp_path, servers, "redis-lost", 2, spark, checkpoint_every=0)
    assert [o["outcome"] for o in result["outages"] if o["component"] == "redis"][-1] == "rebuilt"
    [rollback] = result["rollbacks"]  # counted, and the steps it replayed count as re-processed, not as read
    assert rollback["boundary"] in (0, None) and result["stats"]["recomputed_rows"] > 0, result


def test_unwritable_checkpoint_storage_aborts_checkpoints_not_the_run(
        tmp_path: Path, servers: tuple[EmbeddedZooKeeper, TcpProxy, EmbeddedRedis], spark: object) -> None:
    """Checkpoint storage is a file, not a directory, until step 5 committed: every write below it
    fails, even as root. The checkpoints of that time are aborted with the path in the reason; the run
    goes on, a later checkpoint commits, and the output equals the oracle."""
    _, proxy, r = servers
    pipeline = clickstream(tmp_path, "storage", steps=STEPS, workers=2, rows_per_step=3000,
                           parallelism=PARALLELISM, checkpoint_every=2)
    storage = tmp_path / "checkpoints"
    storage.write_text("storage unavailable")
    summary = tmp_path / "summary.json"
    proc = _start(tmp_path, pipeline, proxy, r, summary)
    try:
        store = RunStore(redis.Redis.from_url(r.url), identity_of(pipeline))
        deadline = time.monotonic() + 300
        while store.committed() < 5 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert proc.poll() is None and store.committed() >= 5, proc.communicate()[0]
        storage.unlink()
        output = proc.communicate(timeout=600)[0]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, output
    lines = [json.loads(x) for x in (tmp_path / "run" / "coordinator.log").read_text().splitlines()]
    aborted = [x for x in lines if x["message"] == "checkpoint aborted"]
    assert aborted, "no checkpoint was aborted while storage was unwritable"
    assert all("could not write to checkpoint storage" in x["reason"] and str(storage) in x["reason"]
               for x in aborted), aborted
    last_abort = max(lines.index(x) for x in aborted)
    assert any(x["message"] == "checkpoint committed" for x in lines[last_abort:]), "no checkpoint after storage came back"
    executors = "".join(p.read_text() for p in (tmp_path / "run" / "workers").glob("*/executor.log"))
    assert "Traceback" not in executors and '"message": "snapshot failed"' in executors
    result = json.loads(summary.read_text())
    assert result["committed"] == STEPS and result["recoveries"] == [], result["recoveries"]
    [comparison] = compare(spark, load_pipeline(pipeline), STEPS)
    assert comparison.duplicates == 0 and comparison.equal, comparison
