"""A worker asked to leave (SIGTERM, as a drain's eviction sends) hands its channels over: the run counts no
recovery, re-runs nothing, and its output equals the oracle (coordinator/evacuation.py, worker/leaving.py).

Through the real CLI: ``--fault evict`` signals the worker's sidecar and Spark process as a kubelet signals a
pod's containers; real Redis, ZooKeeper, Spark and checkpoint storage.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.pipelines import clickstream, run_cli, verified

CASES = [
    # (name, pipeline knobs, the step the eviction lands in)
    ("lockstep", {"checkpoint_every": 5}, 4),
    # steps in flight when it is asked, the states in RocksDB, a checkpoint taken before
    ("pipelined-rocksdb", {"mode": "pipelined", "checkpoint_every": 3, "state_backend": "rocksdb"}, 6),
]


@pytest.mark.parametrize("name,knobs,step", CASES, ids=[c[0] for c in CASES])
def test_an_evicted_worker_hands_its_channels_over_and_nothing_is_recovered(
        tmp_path: Path, name: str, knobs: dict[str, object], step: int) -> None:
    pipeline = clickstream(tmp_path, f"evict-{name}", steps=12, workers=3, rows_per_step=6000,
                           **knobs)  # type: ignore[arg-type]
    run = run_cli(pipeline, tmp_path / "run", "--kill-at-step", str(step), "--fault", "evict",
                  "--kill-worker", "w1", "--verify")
    assert run.code == 0, run.output[-4000:]
    verified(run.output, run.summary)
    assert run.summary["recoveries"] == [], run.output[-3000:]
    [evacuation] = run.summary["evacuations"]
    assert evacuation["worker"] == "w1" and evacuation["strategy"] == "evacuation"
    assert evacuation["moved"] and all(w != "w1" for w in evacuation["moved"].values())
    assert run.summary["stats"].get("recomputed_rows", 0) == 0, run.summary["stats"]  # no replay, no rollback
    assert "evacuated w1" in run.output and "lost" not in run.output, run.output[-3000:]
    # checkpoints commit after it: the message counts the leaver took with it were settled
    assert any(c["boundary"] > step for c in run.summary["checkpoints"]), run.summary["checkpoints"]
    # a replacement is started (whether it joins before these few steps end depends on its JVM's start)
    assert '"starting replacement", "worker": "w3"' in (run.run_dir / "coordinator.log").read_text()
