"""A running aggregate with a TTL, through the real CLI: the keys it forgets start new totals, as
the oracle (sessions cut at gaps longer than the TTL) says, through a killed worker too — whose
stateful channels are rebuilt step by step from their snapshot — on both state backends."""

from __future__ import annotations

from pathlib import Path

import pytest

from ftpipeline.oracle import compare
from ftpipeline.spec import load_pipeline

from ..pipelines import clickstream, run_cli


@pytest.mark.parametrize("backend, strategy", [("rocksdb", "lineage"), ("memory", "auto")])
def test_a_ttl_aggregate_equals_the_oracle_through_a_killed_worker(
        tmp_path: Path, redis_url: str, spark: object, backend: str, strategy: str) -> None:
    steps = 16
    # two workers, two channels per stage: whichever is killed held a per-user channel
    pipeline = clickstream(tmp_path, f"ttl-{backend}", steps=steps, workers=2, rows_per_step=3000, ttl_steps=2,
                           checkpoint_every=5, strategy=strategy, state_backend=backend,
                           parallelism={"events": 2, "clean": 2, "per-user": 2, "output": 2})
    run = run_cli(pipeline, tmp_path / "run", "--redis-url", redis_url, "--kill-at-step", "9",
                  "--kill-after-tasks", "2", "--seed", "4")
    assert run.code == 0, run.output
    assert run.summary["committed"] == steps
    [recovery] = run.summary["recoveries"]
    if strategy == "lineage":  # its per-user channel was rebuilt from its snapshot, step by step
        assert any(ch.startswith("per-user.") for ch in recovery["rebuilt"]), recovery
    assert run.summary["stats"].get("evicted_keys", 0) > 0, run.summary["stats"]  # the TTL did forget keys
    [result] = compare(spark, load_pipeline(pipeline), steps)
    assert result.duplicates == 0, result
    assert result.equal, result
