"""A checkpoint's manifest read under another parallelism: which channels come from which snapshots, or why not."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from ftpipeline.checkpoint.rescale import changed_stages, parse, reshape
from ftpipeline.spec.load import SpecError, parse_pipeline

ROOT = Path(__file__).resolve().parents[3]


def spec(**parallelism: int) -> Any:
    doc = yaml.safe_load((ROOT / "examples" / "clickstream" / "pipeline.yaml").read_text())
    for stage in doc["spec"]["stages"]:
        stage["parallelism"] = parallelism.get(stage["name"].replace("-", "_"), 2)
    return parse_pipeline(yaml.safe_dump(doc), ROOT / "examples" / "clickstream")


def manifest(channels: int, steps: list[int] | None = None, **extra: Any) -> dict[str, Any]:
    steps = steps or [8] * channels
    return {"epoch": 4, "boundary": 8, "offsets": {"events.0": 800, "events.1": 800}, "gt_last": 8,
            "states": {f"per-user.{i}": {"channel": f"per-user.{i}", "step": steps[i],
                                         "path": f"epoch-4/state/per-user.{i}.rocks" if i != 1 else "",
                                         "rows": 10, "bytes": 100} for i in range(channels)},
            "inflight": {}, **extra}


def test_the_same_parallelism_reads_the_manifest_as_it_is() -> None:
    m = manifest(2)
    assert reshape(m, spec()) == m and changed_stages(m, spec()) == []


@pytest.mark.parametrize("old,new", [(2, 3), (3, 2)])
def test_each_new_channel_is_restored_from_every_old_snapshot_of_its_stage(old: int, new: int) -> None:
    s = spec(per_user=new, output=new)
    m = manifest(old)
    assert changed_stages(m, s) == ["per-user"]
    out = reshape(m, s)
    assert sorted(out["states"]) == [f"per-user.{i}" for i in range(new)]
    for i in range(new):
        entry = out["states"][f"per-user.{i}"]
        assert entry["step"] == 8
        rescaled = parse(entry["path"])
        assert rescaled is not None and rescaled.parallelism == new and rescaled.keys == ("user_id",)
        # the empty snapshot (channel 1 held no key) has no path: nothing to read from it
        assert rescaled.sources == tuple(f"epoch-4/state/per-user.{j}.rocks" for j in range(old) if j != 1)
    assert m["states"]["per-user.0"]["path"] == "epoch-4/state/per-user.0.rocks"  # the stored manifest untouched
    assert parse("epoch-4/state/per-user.0.rocks") is None


def test_what_cannot_be_re_partitioned_is_refused_naming_the_field() -> None:
    with pytest.raises(SpecError) as source:
        reshape(manifest(2), spec(events=3, clean=3))
    assert [p.path for p in source.value.problems] == ["spec.stages[0].parallelism"]
    with pytest.raises(SpecError) as pipelined:
        reshape(manifest(3, steps=[8, 8, 7]), spec(per_user=2, output=2))
    assert [p.path for p in pipelined.value.problems] == ["spec.stages[2].parallelism"]
    assert "pipelined" in str(pipelined.value)


def test_an_empty_snapshot_of_another_step_does_not_make_a_cut_pipelined() -> None:
    out = reshape(manifest(2, steps=[8, 0]), spec(per_user=3, output=3))  # channel 1: no key, no path
    assert {s["step"] for s in out["states"].values()} == {8}
