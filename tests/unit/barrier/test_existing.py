"""A fresh run over sinks that already hold output: fail, overwrite or resume, and nothing half-done."""

from __future__ import annotations

from pathlib import Path

import pytest

from ftpipeline.barrier.existing import prepare_outputs
from ftpipeline.spec import parse_pipeline

PIPELINE = """
apiVersion: ftpipeline.io/v1alpha1
kind: FTPipeline
metadata: {{name: two-sinks}}
spec:
  image: x
  entryPoint: m.py
  workers: 1
  stages:
    - {{name: src, parallelism: 1, source: {{generator: {{function: gen, rowsPerStep: 4}}}}}}
    - {{name: a, parallelism: 1, inputs: [{{stage: src}}], sink: {{parquet: {{path: a}}{a}}}}}
    - {{name: b, parallelism: 1, inputs: [{{stage: src}}], sink: {{parquet: {{path: b}}{b}}}}}
"""


def _spec(tmp_path: Path, a: str | None, b: str | None):  # type: ignore[no-untyped-def]
    policy = {p: f", existingOutput: {v}" if v else "" for p, v in (("a", a), ("b", b))}
    return parse_pipeline(PIPELINE.format(**policy), tmp_path, check_entry_point=False)


def _released(path: Path, *steps: int) -> None:
    for step in steps:
        (path / f"step={step}").mkdir(parents=True)


def _tree(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


def test_fail_is_the_default_and_touches_nothing(tmp_path: Path) -> None:
    _released(tmp_path / "a", 1, 2)
    _released(tmp_path / "dead" / "src", 1)
    before = _tree(tmp_path)
    [problem] = prepare_outputs(_spec(tmp_path, None, "overwrite"), tmp_path / "dead")
    assert problem.field == "spec.stages[1].sink.existingOutput" and problem.gt_last == 2
    assert str(problem).startswith(f"{tmp_path / 'a'} already holds output (steps up to 2) and "
                                   "spec.stages[1].sink.existingOutput is fail")
    assert _tree(tmp_path) == before  # b's overwrite waits for a: nothing is half-done


def test_overwrite_removes_old_steps_and_dead_letters_resume_keeps_them(tmp_path: Path) -> None:
    _released(tmp_path / "a", 1, 2)
    _released(tmp_path / "b", 1, 2, 3)
    (tmp_path / "a" / "_staging").mkdir()
    _released(tmp_path / "dead" / "src", 1)
    assert prepare_outputs(_spec(tmp_path, "overwrite", "resume"), tmp_path / "dead") == []
    assert not (tmp_path / "a").exists() and not (tmp_path / "dead").exists()
    assert _tree(tmp_path / "b") == ["step=1", "step=2", "step=3"]


@pytest.mark.parametrize("policy", [None, "fail", "overwrite", "resume"])
def test_empty_sinks_are_fine_whatever_the_policy(tmp_path: Path, policy: str | None) -> None:
    assert prepare_outputs(_spec(tmp_path, policy, policy), tmp_path / "dead") == []



WINDOWED = """
apiVersion: ftpipeline.io/v1alpha1
kind: FTPipeline
metadata: {name: windowed}
spec:
  entryPoint: m.py
  workers: 1
  stages:
    - name: src
      source: {file: {path: in, format: jsonl, rowsPerStep: 4, schema: {k: string, ts: long}}, eventTime: {column: ts}}
    - name: win
      inputs: [{stage: src}]
      aggregate: {keyBy: [k], aggregations: [{name: n, op: count}],
                  window: {tumbling: {size: 1m}, lateData: {path: late}}}
    - {name: out, inputs: [{stage: win}], sink: {parquet: {path: out}, existingOutput: overwrite}}
"""


def test_overwrite_removes_the_late_records_of_the_windows_and_nothing_else_there(tmp_path: Path) -> None:
    _released(tmp_path / "out", 1)
    _released(tmp_path / "late" / "win", 1, 2)
    _released(tmp_path / "late" / "someone-elses", 1)
    spec = parse_pipeline(WINDOWED, tmp_path, check_entry_point=False)
    assert prepare_outputs(spec, tmp_path / "dead") == []
    assert _tree(tmp_path / "late") == ["someone-elses", "someone-elses/step=1"]
