"""Retention: the newest ``retain`` checkpoints, minus those past ``maxAgeSeconds`` (never the newest), plus
the pinned ones (asked for by name)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.unit.coordinator.test_checkpoint_schedule import Clock, manager


class Manifests:
    """The pointer's reads retention makes: committed epochs and their manifests (commit time, boundary)."""

    def __init__(self, times: dict[int, float]) -> None:
        self.times = times

    def epochs(self) -> list[int]:
        return sorted(self.times)

    def manifest(self, epoch: int) -> dict[str, Any] | None:
        return {"epoch": epoch, "boundary": epoch * 10, "time": self.times[epoch]} if epoch in self.times else None


def test_retain_keeps_the_newest_and_pinned_ones_whatever_their_number(tmp_path: Path) -> None:
    m = manager(tmp_path, Clock(), pointer=Manifests({1: 0, 2: 0, 3: 0, 4: 0}), checkpoint_retain=2)
    assert m.retained([1, 2, 3, 4], 4) == {3, 4}
    m.pinned = lambda: {1, 9}  # 9: not committed (its checkpoint is gone): nothing to keep
    assert m.retained([1, 2, 3, 4], 4) == {1, 3, 4}


def test_max_age_drops_old_ones_but_never_the_newest_nor_a_pinned_one(tmp_path: Path) -> None:
    m = manager(tmp_path, Clock(), pointer=Manifests({1: 100.0, 2: 150.0, 3: 190.0}), checkpoint_retain=3,
                checkpoint_max_age_s=60)
    m.wall = lambda: 200.0
    assert m.retained([1, 2, 3], 3) == {2, 3}
    m.wall = lambda: 1000.0
    assert m.retained([1, 2, 3], 3) == {3}
    m.pinned = lambda: {1}
    assert m.retained([1, 2, 3], 3) == {1, 3}


def test_boundaries_and_commit_times_are_read_once_per_epoch(tmp_path: Path) -> None:
    reads: list[int] = []

    class Counting(Manifests):
        def manifest(self, epoch: int) -> dict[str, Any] | None:
            reads.append(epoch)
            return super().manifest(epoch)

    m = manager(tmp_path, Clock(), pointer=Counting({1: 50.0, 2: 0}), checkpoint_max_age_s=60)
    m.wall = lambda: 100.0
    assert m._known(1) == (10, 50.0) and m._known(1) == (10, 50.0) and reads == [1]
    assert m.retained([1, 2], 2) == {1, 2} and m.retained([1, 2], 2) == {1, 2}
    assert reads == [1]  # read once, however many commits ask its age (the newest's age is never asked)
