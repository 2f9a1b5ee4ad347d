"""The command log in a real run: hung workers found by their heartbeats, zombies fenced off, a
killed coordinator resumed from the log, and a log that stays short.

Real Redis, real ZooKeeper, real PySpark workers through the CLI; the oracle is
one plain PySpark batch job over the whole input.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from ftpipeline.commandlog.state import ClusterState
from ftpipeline.commandlog.zklog import CommandLog
from ftpipeline.coordinator.faults import CRASH_EXIT
from ftpipeline.oracle import compare
from ftpipeline.spec import load_pipeline

from ..pipelines import clickstream, identity_of, run_cli

# three workers: w0 and w1 hold an aggregate channel each, w2 only stateless channels
PARALLELISM = {"events": 3, "clean": 3, "per-user": 2, "output": 2}

# A stop or a zombie lands while the victim runs a task (coordinator/detection.py): every task a Spark job
# again (the functions called per task), as on Arrow compute a transform task takes a millisecond and is
# rarely seen running
SLOW_TASKS = ("--no-plan-reuse",)


def log_state(zookeeper: str, pipeline: Path) -> tuple[ClusterState, int]:
    zk = KazooClient(hosts=zookeeper)
    zk.start(timeout=10)
    try:
        log = CommandLog(zk, identity_of(pipeline))
        return log.load(), log.znodes()
    finally:
        zk.stop()
        zk.close()


@pytest.mark.parametrize("worker", ["w1", "w2"])
def test_a_stopped_worker_is_found_by_its_heartbeat_and_recovered(
    tmp_path: Path, redis_url: str, zookeeper: str, spark: object, worker: str
) -> None:
    """SIGSTOP: the process and its pod would still exist; only the expired heartbeat tells."""
    pipeline = clickstream(tmp_path, f"stop{worker}", steps=12, rows_per_step=12000, parallelism=PARALLELISM,
                           heartbeat_ms=2000, checkpoint_every=4)
    run = run_cli(pipeline, tmp_path / "run", "--redis-url", redis_url, "--zookeeper", zookeeper,
                  "--fault", "stop", "--kill-at-step", "4", "--kill-worker", worker, *SLOW_TASKS)
    assert run.code == 0, run.output
    assert run.summary["committed"] == 12
    assert run.summary["stats"]["heartbeat_losses"] == 1
    [recovery] = run.summary["recoveries"]
    assert recovery["worker"] == worker
    # the terminal says how it was found, not only that it was lost (a kill says: its processes ending)
    assert f"worker {worker} lost, found by heartbeat expiry after 2000 ms" in " ".join(run.output.split()), run.output
    assert run.summary["source_rows"] == 12 * 12000
    state, _ = log_state(zookeeper, pipeline)
    [(_, lost, reason)] = state.left[-1:]
    assert (lost, reason) == (worker, "heartbeat expired")
    [result] = compare(spark, load_pipeline(pipeline), 12)
    assert result.duplicates == 0, result
    assert result.equal, result


def test_a_zombie_worker_that_wakes_up_after_its_epoch_is_refused(
    tmp_path: Path, redis_url: str, zookeeper: str, spark: object
) -> None:
    """Stopped mid-task, declared dead, recovered around; then it wakes (a healed partition) and finishes
    its task: the commit is refused, the output is untouched."""
    pipeline = clickstream(tmp_path, "zombie", steps=12, rows_per_step=20000, parallelism=PARALLELISM,
                           heartbeat_ms=2000)
    run = run_cli(pipeline, tmp_path / "run", "--redis-url", redis_url, "--zookeeper", zookeeper,
                  "--fault", "zombie", "--kill-at-step", "4", "--kill-worker", "w2", *SLOW_TASKS)
    assert run.code == 0, run.output
    stats = run.summary["stats"]
    assert stats["heartbeat_losses"] == 1
    # refused at its commit, at a sink write, or stopped by the peer's fence before it tried either
    assert stats.get("fenced_commits", 0) + stats.get("fenced_sink_writes", 0) + stats.get("fenced_stops", 0) >= 1, stats
    sidecar_log = (tmp_path / "run" / "workers" / "w2" / "sidecar.log").read_text()
    # it did wake up, and was refused: by its commit's fencing, or by the peer once its session was gone
    assert '"message": "fenced"' in sidecar_log, sidecar_log[-2000:]
    said = " ".join(run.output.split())
    assert "worker w2 lost, found by heartbeat expiry after 2000 ms" in said, run.output
    assert "worker w2 woke up after its recovery and was fenced off" in said, run.output
    assert run.summary["source_rows"] == 12 * 20000
    [result] = compare(spark, load_pipeline(pipeline), 12)
    assert result.duplicates == 0, result
    assert result.equal, result


def _start(pipeline: Path, run_dir: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "ftpipeline.cli", "run", str(pipeline), "--no-progress", "--run-dir", str(run_dir),
           *args]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            cwd=run_dir.parent, env={**os.environ, **(env or {})})


@pytest.mark.parametrize("when", ["mid-step", "mid-recovery", "mid-step-private"])
def test_a_killed_coordinator_resumes_from_the_log(
    tmp_path: Path, redis_url: str, zookeeper: str, spark: object, when: str
) -> None:
    steps = 16
    name = f"coord{when.replace('-', '')}"
    pipeline = clickstream(tmp_path, name, steps=steps, rows_per_step=6000, parallelism=PARALLELISM,
                           checkpoint_every=3, strategy="lineage")
    # mid-step-private: ftpipeline run's own Redis and ZooKeeper, which the kill orphans with the workers;
    # the resumed run keeps them all and takes the workers over (cluster/local.py): no JVM starts again
    private = when.endswith("private")
    servers = [] if private else ["--redis-url", redis_url, "--zookeeper", zookeeper]
    run_dir = tmp_path / "run"
    if when.startswith("mid-step"):  # SIGKILL from outside once step 7 is out: step 8 is being computed
        proc = _start(pipeline, run_dir, *servers)
        deadline = time.monotonic() + 600
        while not (tmp_path / "out" / "step=7").exists():
            assert proc.poll() is None, proc.communicate()[0]
            assert time.monotonic() < deadline
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
    else:  # the coordinator dies right after it wrote the recovery epoch, before applying the plan
        proc = _start(pipeline, run_dir, *servers, "--kill-at-step", "6", "--kill-worker", "w0",
                      env={"FTPIPELINE_CRASH_AFTER": "recovery"})
    output = proc.communicate(timeout=600)[0]
    assert proc.returncode in (-signal.SIGKILL, CRASH_EXIT), output
    if private:
        workers = sorted(p.name for p in (run_dir / "workers").iterdir())
        pids = {f.relative_to(run_dir): f.read_text()
                for f in (*run_dir.glob("workers/*/pgid"), *run_dir.glob("workers/*/spid"), *run_dir.glob("workers/*/epid"),
                          *run_dir.glob("*/*.pid"))}
        assert len(pids) == 3 * len(workers) + 2, pids  # each worker's group, sidecar and Spark process, Redis, ZooKeeper
        resumed = run_cli(pipeline, run_dir, "--resume", private=True)
        assert resumed.code == 0, resumed.output
        said = f"taking over the workers the earlier run left running ({', '.join(workers)})"
        assert said in " ".join(resumed.output.split()), resumed.output
        assert {f: (run_dir / f).read_text() for f in pids} == pids  # every process kept, none started
        assert sorted(p.name for p in (run_dir / "workers").iterdir()) == workers
        assert resumed.summary["committed"] == steps
        assert resumed.summary["source_rows"] == steps * 6000  # the run before the resume's rows too, each once
        ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
        # nothing orphaned is left (workers of this run: their --dir lies in its run directory)
        assert not [line for line in ps.splitlines() if "ftpipeline.worker" in line and str(run_dir) in line]
        [result] = compare(spark, load_pipeline(pipeline), steps)
        assert result.duplicates == 0 and result.equal, result
        return
    before, _ = log_state(zookeeper, pipeline)
    assert 0 < before.committed < steps
    if when == "mid-recovery":
        assert before.recoveries == 1 and before.left and before.left[-1][1] == "w0"
    resumed = run_cli(pipeline, run_dir, *servers, "--resume")
    assert resumed.code == 0, resumed.output
    assert resumed.summary["committed"] == steps
    assert resumed.summary["source_rows"] == steps * 6000
    after, _ = log_state(zookeeper, pipeline)
    assert after.committed == steps
    assert after.run_epoch == before.run_epoch + 1 and after.epoch > before.epoch  # the old epoch is fenced
    assert (after.duplicate_commits, after.conflicting_starts) == (0, 0)  # each step re-run as first started
    [result] = compare(spark, load_pipeline(pipeline), steps)
    assert result.duplicates == 0, result
    assert result.equal, result


def test_the_log_stays_bounded_over_500_steps(tmp_path: Path, redis_url: str, zookeeper: str) -> None:
    steps = 500
    pipeline = clickstream(tmp_path, "long", steps=steps, workers=2, rows_per_step=200, checkpoint_every=50)
    run = run_cli(pipeline, tmp_path / "run", "--redis-url", redis_url, "--zookeeper", zookeeper)
    assert run.code == 0, run.output
    assert run.summary["committed"] == steps
    state, znodes = log_state(zookeeper, pipeline)
    # compaction every 50 commands by the coordinator, plus the workers' few membership commands
    assert run.summary["stats"]["log_znodes_max"] <= 60, run.summary["stats"]
    assert znodes <= 60
    assert state.committed == steps and state.duplicate_commits == 0
    zk = KazooClient(hosts=zookeeper)
    zk.start(timeout=10)
    started = time.perf_counter()
    late = CommandLog(zk, identity_of(pipeline)).load()
    print(f"\nlate peer: snapshot + {znodes} commands, state at step {late.committed}, "
          f"{(time.perf_counter() - started) * 1000:.1f} ms")
    zk.stop()
    zk.close()
    assert late == state
