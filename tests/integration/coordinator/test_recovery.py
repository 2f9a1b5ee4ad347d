"""A worker is SIGKILLed mid-step; the output must equal the oracle, row for row.

Real Redis, real PySpark workers (a sidecar and a Spark process each), the
real CLI. The oracle is the same pipeline as one plain PySpark batch job
(``ftpipeline.oracle``, checked on its own in ``test_oracle.py``).
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from pathlib import Path

import pytest
import yaml

from ftpipeline.oracle import compare
from ftpipeline.spec import load_pipeline

from ..pipelines import EXAMPLE, CliRun, clickstream, run_cli, sampled


@pytest.mark.parametrize("seed", sampled(list(range(5)), [0, 3]))
def test_example_survives_a_killed_worker(tmp_path: Path, redis_url: str, spark: object, seed: int) -> None:
    rng = random.Random(seed)
    kill_step = rng.randint(2, 18)
    after_tasks = rng.randint(1, 4)  # of the step's 5 tasks: events+clean chained (3 channels), per-user+output (2)
    pipeline = clickstream(tmp_path, f"kill{seed}", steps=20, parallelism={"events": 3, "clean": 3, "per-user": 2, "output": 2})
    run = run_cli(pipeline, tmp_path / "run", "--redis-url", redis_url, "--kill-at-step", str(kill_step),
                  "--kill-after-tasks", str(after_tasks), "--seed", str(seed))
    assert run.code == 0, run.output
    assert run.summary["committed"] == 20
    assert len(run.summary["recoveries"]) == 1, run.summary
    assert run.summary["stats"]["recovery_tasks"] > 0
    spec = load_pipeline(pipeline)
    [result] = compare(spark, spec, 20)
    assert result.duplicates == 0, result
    assert result.equal, result


def test_recovery_replays_only_the_lost_work_and_does_not_wait_for_the_replacement(
    tmp_path: Path, redis_url: str, spark: object
) -> None:
    """Kill a worker holding stateless channels: re-processed rows <= 1.5x what it had buffered.

    The replacement worker joins only after the recovered step committed, and then
    takes channels back (it runs tasks).
    """
    # three workers; the aggregate and the sink have two channels, so w2 runs events.2 and clean.2 only
    # 100 steps, paced (one 150 ms after the last): the replacement's JVM must start and join while they run; with
    # three workers running steps flat out on two cores it took longer than the 13 s 100 of them lasted
    steps = 100
    pipeline = clickstream(tmp_path, "replay", steps=steps, parallelism={"events": 3, "clean": 3, "per-user": 2, "output": 2})
    doc = yaml.safe_load(pipeline.read_text())
    doc["spec"]["steps"]["trigger"] = {"records": 1_000_000_000, "timerMs": 150}
    pipeline.write_text(yaml.safe_dump(doc, sort_keys=False))
    run = run_cli(pipeline, tmp_path / "run", "--redis-url", redis_url, "--kill-at-step", "3",
                  "--kill-after-tasks", "3", "--kill-worker", "w2")
    assert run.code == 0, run.output
    [recovery] = run.summary["recoveries"]
    assert recovery["worker"] == "w2" and recovery["rebuilt"] == []
    replayed = run.summary["stats"]["replayed_rows"]
    buffered = recovery["buffered_rows"]
    assert buffered > 0
    assert 0 < replayed <= 1.5 * buffered, (replayed, buffered)
    [join] = run.summary["joins"]
    assert join["worker"] == "w3" and join["committed"] >= 3  # step 3 committed without it
    assert run.summary["tasks_by_worker"].get("w3", 0) > 0
    [result] = compare(spark, load_pipeline(pipeline), steps)
    assert result.equal, result


def test_a_spent_restart_budget_fails_the_run_naming_it(tmp_path: Path, redis_url: str) -> None:
    pipeline = clickstream(tmp_path, "budget", steps=6, workers=2, restart_budget={"maxRestarts": 0},
                           parallelism={"events": 2, "clean": 2, "per-user": 2, "output": 2})
    run = run_cli(pipeline, tmp_path / "run", "--redis-url", redis_url, "--kill-at-step", "3")
    assert run.code == 1
    assert "exceed the restart budget of 0 (spec.recovery.restartBudget)" in " ".join(run.output.split())


def test_losing_a_worker_without_fault_tolerance_fails_clearly(tmp_path: Path, redis_url: str) -> None:
    pipeline = clickstream(tmp_path, "noft", steps=6, workers=2, fault_tolerance=False,
                           parallelism={"events": 2, "clean": 2, "per-user": 2, "output": 2})
    run = run_cli(pipeline, tmp_path / "run", "--redis-url", redis_url, "--kill-at-step", "3")
    assert run.code == 1
    assert "faultTolerance is false" in run.output


# The clean stage of the example behind a Python UDF that holds the first row of step 4 or later
# (event ids count a channel's rows: 3,000 per step here): it marks the file MARK with its worker's
# process group and waits, so the test kills the worker there, while Spark runs the chain, after the
# chain's source has read its rows and before the chain's output exists. A UDF runs on every step's
# rows, whether or not the chain's plan is reused (dataflow/plans.py). It runs in a Python process
# Spark forks in a process group of its own: the mark holds its pid, and the test kills the worker
# whose process group holds one of its ancestors (its JVM), then the UDF's process.
MID_CHAIN = '''
import os, sys, time
sys.path.insert(0, {example!r})
from pyspark.sql import functions as F
from clickstream import generate_events, clean_events as _clean


def _hold(event_id):
    if int(event_id.split("-")[1]) >= 9000 and not os.path.exists({mark!r}):
        try:
            fd = os.open({mark!r}, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return True
        os.write(fd, str(os.getpid()).encode())
        os.close(fd)
        time.sleep(60)
    return True


def clean_events(df):
    return _clean(df.filter(F.udf(_hold, "boolean", useArrow=False)(F.col("event_id"))))
'''


def _ancestors(pid: int) -> list[int]:
    found = []
    while pid > 1:
        found.append(pid)
        pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    return found


def test_a_kill_in_the_middle_of_a_chain_reruns_the_chain_whole(tmp_path: Path, redis_url: str, spark: object) -> None:
    """events -> clean run as one chained task; the worker is SIGKILLed inside it, between the two stages."""
    mark = tmp_path / "mid-chain"
    module = tmp_path / "midchain.py"
    module.write_text(MID_CHAIN.format(example=str(EXAMPLE), mark=str(mark)))
    pipeline = clickstream(tmp_path, "midchain", steps=12, parallelism={"events": 3, "clean": 3, "per-user": 2, "output": 2})
    pipeline.write_text(pipeline.read_text().replace(str(EXAMPLE / "clickstream.py"), str(module)))
    done: list[CliRun] = []
    runner = threading.Thread(target=lambda: done.append(run_cli(pipeline, tmp_path / "run", "--redis-url", redis_url)))
    runner.start()
    deadline = time.monotonic() + 600
    while not (mark.exists() and mark.read_text()) and runner.is_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert mark.exists(), "no worker reached the middle of a chain"
    udf = int(mark.read_text())
    groups = {int(p.read_text()): p.parent.name for p in (tmp_path / "run" / "workers").glob("*/pgid")}
    pgid = next(os.getpgid(pid) for pid in _ancestors(udf) if os.getpgid(pid) in groups)
    killed = groups[pgid]
    os.killpg(pgid, signal.SIGKILL)
    os.kill(udf, signal.SIGKILL)
    runner.join(900)
    [run] = done
    assert run.code == 0, run.output
    [recovery] = run.summary["recoveries"]
    assert recovery["worker"] == killed
    moved = set(recovery["moved"])
    assert moved and all(c.split(".")[0] in ("events", "per-user") for c in moved), moved  # chains, not stages
    assert run.summary["committed"] == 12
    [result] = compare(spark, load_pipeline(pipeline), 12)
    assert result.duplicates == 0, result
    assert result.equal, result
