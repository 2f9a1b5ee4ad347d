"""ZooKeeper out of reach mid-run — cut off for 30 s, or killed and restarted — costs time, not the run.

Real ZooKeeper, real workers: the run pauses (a log line, the outage in the
summary), the workers whose sessions expired meanwhile are not recovered but
re-register (they still answer), and the output equals the oracle.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

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
    """A ZooKeeper of this test's own (it is killed), behind a proxy (it is cut), and a Redis."""
    zk = EmbeddedZooKeeper(tmp_path / "zookeeper").start()
    proxy = TcpProxy(zk.port).start()
    r = EmbeddedRedis(tmp_path / "redis").start()
    yield zk, proxy, r
    proxy.stop()
    zk.stop()
    r.stop()


def _run_through(tmp_path: Path, servers: tuple[EmbeddedZooKeeper, TcpProxy, EmbeddedRedis], fault: str,
                 seconds: float, spark: object) -> dict[str, object]:
    zk, proxy, r = servers
    pipeline = clickstream(tmp_path, f"zk{fault}", steps=STEPS, workers=2, rows_per_step=3000,
                           parallelism=PARALLELISM, checkpoint_every=4)
    summary = tmp_path / "summary.json"
    proc = subprocess.Popen([sys.executable, "-m", "ftpipeline.cli", "run", str(pipeline), "--no-progress",
                             "--run-dir", str(tmp_path / "run"), "--redis-url", r.url, "--zookeeper", proxy.address,
                             "--summary-json", str(summary)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, cwd=tmp_path)
    store = RunStore(redis.Redis.from_url(r.url), identity_of(pipeline))
    deadline = time.monotonic() + 300
    while store.committed() < 3 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    at = store.committed()
    assert proc.poll() is None and at >= 3, proc.communicate()[0]
    if fault == "cut":
        proxy.cut()
        time.sleep(seconds)
        assert store.committed() <= at + 1, "steps went on without the command log"
        proxy.restore()
    else:
        zk.kill()
        time.sleep(seconds)
        zk.start()
    output = proc.communicate(timeout=600)[0]
    assert proc.returncode == 0, output
    log = (tmp_path / "run" / "coordinator.log").read_text()
    assert '"message": "control plane unavailable", "component": "zookeeper"' in log
    assert '"message": "control plane available again", "component": "zookeeper"' in log
    result = json.loads(summary.read_text())
    assert result["committed"] == STEPS
    assert result["recoveries"] == [], result["recoveries"]  # an outage is not N worker deaths
    [outage] = [o for o in result["outages"] if o["component"] == "zookeeper"]
    assert outage["seconds"] >= seconds * 0.8 and outage["outcome"] == "resumed", result["outages"]
    [comparison] = compare(spark, load_pipeline(pipeline), STEPS)
    assert comparison.duplicates == 0 and comparison.equal, comparison
    return result


def test_a_30_second_zookeeper_outage_pauses_the_run_and_it_finishes(
        tmp_path: Path, servers: tuple[EmbeddedZooKeeper, TcpProxy, EmbeddedRedis], spark: object) -> None:
    """Cut for 30 s, five times the workers' heartbeat timeout: every session expires."""
    _run_through(tmp_path, servers, "cut", 30, spark)


def test_a_zookeeper_restart_is_waited_for(
        tmp_path: Path, servers: tuple[EmbeddedZooKeeper, TcpProxy, EmbeddedRedis], spark: object) -> None:
    """Killed (no clean shutdown) and started again on its data directory after 4 s, as in the report
    that every worker was declared lost."""
    _run_through(tmp_path, servers, "restart", 4, spark)
