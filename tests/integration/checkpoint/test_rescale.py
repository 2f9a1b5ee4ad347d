"""A pipeline resumed from a checkpoint with another parallelism: its keyed state is re-partitioned, not lost.

Through the real CLI: a run checkpoints, stops, and is resumed with its
aggregate (and the sink it feeds one-to-one) on more, or fewer, channels and
workers. ``--verify`` compares the whole output, before and after the
change, with a batch job: a key restored into the wrong channel, or not at
all, shows as a wrong running total. A change that cannot be re-partitioned
(a source's parallelism) is refused naming the field, and leaves the
checkpoints and the output as they were.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.integration.pipelines import clickstream, run_cli, verified


def _files(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_size for p in sorted(root.rglob("*")) if p.is_file()}


def _with(pipeline: Path, steps: int, workers: int, parallelism: dict[str, int]) -> None:
    doc = yaml.safe_load(pipeline.read_text())
    doc["spec"]["steps"]["maxSteps"] = steps
    doc["spec"]["workers"] = workers
    for stage in doc["spec"]["stages"]:
        stage["parallelism"] = parallelism.get(stage["name"], stage["parallelism"])
    pipeline.write_text(yaml.safe_dump(doc, sort_keys=False))


@pytest.mark.parametrize("before,after", [(2, 3), (3, 2)], ids=["grow", "shrink"])
def test_an_aggregate_resumed_on_another_parallelism_keeps_every_keys_state(tmp_path: Path, before: int,
                                                                            after: int) -> None:
    stages = {"events": 2, "clean": 2, "per-user": before, "output": before}
    pipeline = clickstream(tmp_path, f"rescale-{before}-{after}", steps=6, workers=before, rows_per_step=3000,
                           parallelism=stages, checkpoint_every=2)
    first = run_cli(pipeline, tmp_path / "run")
    assert first.code == 0, first.output[-3000:]
    kept = _files(tmp_path / "checkpoints"), _files(tmp_path / "out")

    _with(pipeline, 10, after, {**stages, "events": 3, "clean": 3})  # a source's channels: refused, untouched
    refused = run_cli(pipeline, tmp_path / "run", "--resume")
    assert refused.code == 2, refused.output[-3000:]
    assert "spec.stages[0].parallelism" in refused.output and "source" in refused.output, refused.output[-2000:]
    assert (_files(tmp_path / "checkpoints"), _files(tmp_path / "out")) == kept

    _with(pipeline, 10, after, {**stages, "per-user": after, "output": after})
    resumed = run_cli(pipeline, tmp_path / "run", "--resume", "--verify")
    assert resumed.code == 0, resumed.output[-4000:]
    verified(resumed.output, resumed.summary)
    assert resumed.summary["committed"] == 10
    newest = max((tmp_path / "checkpoints").rglob("manifest.json"), key=lambda p: json.loads(p.read_text())["epoch"])
    manifest = json.loads(newest.read_text())
    assert sorted(manifest["states"]) == [f"per-user.{i}" for i in range(after)], manifest["states"]
    assert manifest["parallelism"]["per-user"] == after
    log = (tmp_path / "run" / "coordinator.log").read_text()
    assert "re-partitioning a stage's state by key" in log
