"""The step history: each released step's record, appended by whichever worker released it, read back whole."""

from __future__ import annotations

from pathlib import Path

from ftpipeline.control import history
from ftpipeline.control.store import StepRecord
from ftpipeline.lineage.stepclock import StepClock
from ftpipeline.lineage.naming import Channel
from ftpipeline.objectstore.base import open_store


def record(step: int, lo: int, hi: int, watermark: int | None = None) -> str:
    return StepRecord(step, {Channel("views", 0): (lo, hi), Channel("views", 1): (lo, hi)}, "records", StepClock(watermark)).to_json()


def test_the_files_of_every_worker_make_one_history(tmp_path: Path) -> None:
    directory = tmp_path / "history"
    store = open_store(directory)
    history.remember(store, "w1", record(1, 0, 10))
    history.remember(store, "w2", record(2, 10, 20, 5_000_000))
    history.remember(store, "w1", record(3, 20, 20, 9_000_000))
    history.remember(store, "w2", record(2, 10, 20, 5_000_000))  # asked again after a failed answer: the same
    assert history.read(directory) == {1: {"views.0": (0, 10), "views.1": (0, 10)},
                                       2: {"views.0": (10, 20), "views.1": (10, 20)},
                                       3: {"views.0": (20, 20), "views.1": (20, 20)}}
    assert history.clocks(directory) == {1: StepClock(), 2: StepClock(5_000_000), 3: StepClock(9_000_000)}
    assert sorted(p.name for p in directory.iterdir()) == ["w1.jsonl", "w2.jsonl"]


def test_no_history_is_empty(tmp_path: Path) -> None:
    assert history.read(tmp_path / "absent") == {} and history.clocks(tmp_path / "absent") == {}
