"""A coordinator that takes over the workers an earlier one left running, instead of starting new ones.

This is what an operator's handover does (``ftpipeline_operator/runner.py``
keeps the pods of a run it stops for the next operator): here the earlier
coordinator stops as an operator that exits does, its workers — real
sidecar and Spark processes, a real Redis and ZooKeeper — stay up, and a
resumed coordinator on the same backend keeps them. No worker is started,
the earlier coordinator is fenced off by the command log, and the output
equals the oracle.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from rich.console import Console

from ftpipeline.cluster.local import LocalCluster
from ftpipeline.commandlog.zklog import CommandLog
from ftpipeline.coordinator.coordinator import Coordinator
from ftpipeline.coordinator.errors import Interrupted, Superseded
from ftpipeline.coordinator.session import Session, open_session
from ftpipeline.obs.metrics import RunMetrics
from ftpipeline.oracle import compare
from ftpipeline.progress import LocalObserver
from ftpipeline.spec import load_pipeline
from ftpipeline.spec.cores import master_for_process
from ftpipeline.spec.model import PipelineSpec

from ..pipelines import clickstream

PARALLELISM = {"events": 2, "clean": 2, "per-user": 2, "output": 2}


def _coordinator(spec: PipelineSpec, cluster: LocalCluster, resume: bool, stop_at: int | None = None
                 ) -> tuple[Coordinator, Session]:
    session = open_session(spec, resume)
    coordinator = Coordinator(spec, session.store, session.tables, cluster, LocalObserver(Console(), None),
                              metrics=RunMetrics(spec.name), pointer=session.pointer, commands=session.commands,
                              resume=resume, stall_timeout_s=300,
                              should_stop=lambda: "operator stopping" if stop_at and coordinator.committed >= stop_at
                              else None)
    return coordinator, session


@pytest.mark.parametrize("checkpoint_every", [3, 0], ids=["checkpoint", "no-checkpoint"])
def test_a_resumed_coordinator_takes_the_running_workers_over_and_the_output_equals_the_oracle(
        tmp_path: Path, redis_url: str, zookeeper: str, spark: object, checkpoint_every: int) -> None:
    """With a checkpoint the workers reopen it; without one they go back to the very beginning (their
    aggregates' state is the earlier run's), and the sinks drop the steps they already released."""
    steps = 12
    pipeline = clickstream(tmp_path, "takeover", steps=steps, workers=2, rows_per_step=4000,
                           parallelism=PARALLELISM, checkpoint_every=checkpoint_every)
    spec = dataclasses.replace(load_pipeline(pipeline), redis_url=redis_url, zookeeper=zookeeper,
                               identity=f"takeover.{tmp_path.name}")
    cluster = LocalCluster(tmp_path / "run", spec.store_key, redis_url, master_for_process(spec.spark_master, 2),
                           dict(spec.spark_conf), zookeeper=zookeeper,
                           heartbeat_timeout_ms=spec.heartbeat_timeout_ms)
    try:
        first, earlier = _coordinator(spec, cluster, resume=False, stop_at=5)
        with pytest.raises(Interrupted):
            first.run()
        first.shutdown(workers=False)  # as an operator that exits: the pods stay for the next one
        stopped_at = first.committed
        pids = {w: cluster.pids(w) for w in cluster.running()}
        assert sorted(pids) == ["w0", "w1"] and 5 <= stopped_at < steps

        second, session = _coordinator(spec, cluster, resume=True)
        result = second.run()
        second.shutdown()
        session.close()
        assert result.committed == steps
        assert sorted(cluster.workers) == ["w0", "w1"]  # no worker was started...
        assert {w: cluster.pids(w) for w in cluster.workers} == pids  # ...nor restarted
        assert not result.recoveries and not result.joins  # no worker was lost or replaced on the way
        with pytest.raises(Superseded):  # the earlier coordinator's log is claimed: it cannot decide anything
            first.journal.append("step-committed", step=stopped_at + 1)
        earlier.close()
    finally:
        cluster.stop()
    zk = KazooClient(hosts=zookeeper)
    zk.start(timeout=10)
    try:
        state = CommandLog(zk, spec.store_key).load()
    finally:
        zk.stop()
        zk.close()
    assert state.run_epoch == 2 and state.committed == steps
    assert (state.duplicate_commits, state.conflicting_starts) == (0, 0)
    [comparison] = compare(spark, spec, steps)
    assert comparison.duplicates == 0, comparison
    assert comparison.equal, comparison
