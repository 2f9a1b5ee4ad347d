"""losses.recover's order: a loss is planned on tables that describe the run, never on a Redis that came back empty;
and a Redis rebuilt while no worker answers starts a new set rather than ending the run.

A worker can be declared lost in the half second between Redis restarting
empty and the periodic generation check: the plan then read empty tables and
placed every channel nowhere (the next step failed with a KeyError). So
recover checks the generation at once, before it reads the tables.
"""

from __future__ import annotations

from typing import Any, cast

import pytest

from ftpipeline.coordinator import admission
from ftpipeline.coordinator.coordinator import Coordinator
from ftpipeline.coordinator.errors import NoMemberAnswers
from ftpipeline.coordinator.losses import rebuild_lost_store, recover
from ftpipeline.lineage.naming import WorkerId

W0, W1 = WorkerId("w0"), WorkerId("w1")


class Planned(Exception):
    """Raised by the fake tables when the plan reads them: the test has seen what it needs."""


class Recorder:
    """Any attribute is a callable that notes its name (and answers None)."""

    def __init__(self, trail: list[str], prefix: str) -> None:
        self._trail, self._prefix = trail, prefix

    def __getattr__(self, name: str) -> Any:
        def note(*args: Any, **kwargs: Any) -> None:
            self._trail.append(f"{self._prefix}.{name}")
        return note


class Members(Recorder):
    def knows(self, worker: WorkerId) -> bool:
        return True

    def lost_while_joining(self, worker: WorkerId, now: float, committed: int, cause: str = "") -> bool:
        return False


class Cluster:
    detects = "its processes ending"

    def why(self, worker: WorkerId) -> str:
        return "exited"


class Journal(Recorder):
    def next_epoch(self) -> int:
        return 2


class Tables(Recorder):
    def snapshot(self, workers: list[WorkerId]) -> None:
        self._trail.append("tables.snapshot")
        raise Planned


class Counter:
    def labels(self, *values: str) -> Counter:
        return self

    def inc(self) -> None:
        pass


class Metrics:
    recoveries = Counter()


class Spec:
    fault_tolerance = True
    metrics_label = "p"
    recovery_strategy = "auto"


class FakeCoordinator:
    def __init__(self) -> None:
        self.trail: list[str] = []
        self.members = Members(self.trail, "members")
        self.cluster = Cluster()
        self.journal = Journal(self.trail, "journal")
        self.observer = Recorder(self.trail, "observer")
        self.ckpt = Recorder(self.trail, "ckpt")
        self.tables = Tables(self.trail, "tables")
        self.spec = Spec()
        self.metrics = Metrics()
        self.workers = [W0, W1]
        self.committed = 4
        self.owner = "coordinator"

    def clock(self) -> float:
        return 0.0

    def check_generation(self, now: bool = False) -> None:
        self.trail.append(f"check_generation(now={now})")

    def clients_for(self, workers: list[WorkerId]) -> dict[WorkerId, object]:
        return {}


def test_a_loss_checks_whether_redis_came_back_empty_before_it_reads_the_tables() -> None:
    c = FakeCoordinator()
    with pytest.raises(Planned):
        recover(cast(Coordinator, c), W1, "process exited")
    assert "check_generation(now=True)" in c.trail, c.trail
    assert c.trail.index("check_generation(now=True)") < c.trail.index("tables.snapshot"), c.trail


class Silent(Recorder):
    """Members none of which answers: each died with the outage that emptied Redis."""

    joining: list[WorkerId] = []

    def call_any(self, action: str, body: dict[str, Any], what: str) -> Any:
        raise NoMemberAnswers(f"no worker could {what} (last: w1: connection refused)")


class Checkpoints(Recorder):
    last = {"boundary": 4, "epoch": 1}


class Client:
    address = "127.0.0.1:1"


class RebuildingCoordinator(FakeCoordinator):
    def __init__(self) -> None:
        super().__init__()
        self.members = Silent(self.trail, "members")
        self.cluster = Recorder(self.trail, "cluster")  # type: ignore[assignment]
        self.control = Recorder(self.trail, "control")
        self.store = Recorder(self.trail, "store")
        self.generation, self.run_token, self.placement = "g2", "run", {}
        self.rollbacks: list[object] = []
        self.ckpt = Checkpoints(self.trail, "ckpt")

    def client(self, worker: WorkerId) -> Client:
        return Client()


def test_a_redis_rebuilt_when_no_worker_answers_starts_a_new_set_instead_of_failing_the_run(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Chaos: a ZooKeeper cut fenced the last member just as Redis came back empty. The rollback's first
    call reached nobody, and the run failed ("no worker could read the sinks' newest released step")."""
    started: list[tuple[WorkerId, str]] = []
    monkeypatch.setattr(admission, "start_over", lambda c, dead, reason, cause="": started.append((dead, reason)))
    c = RebuildingCoordinator()
    rebuild_lost_store(cast(Coordinator, c))
    assert started == [(W0, "no answer after Redis lost the run's state")]
    assert c.trail.count("cluster.kill_worker") == 2 and c.trail.count("cluster.declare_lost") == 2, c.trail
    assert c.rollbacks == []  # the new set's rollback is start_over's
    assert c.trail[-1] == "control.recovered", c.trail


class Forgetting(Members):
    """Members that a Redis rebuild replaced by a new set (no member answered it)."""

    started_over = False

    def knows(self, worker: WorkerId) -> bool:
        return not self.started_over


class StartedOverCoordinator(FakeCoordinator):
    def __init__(self) -> None:
        super().__init__()
        self.members = Forgetting(self.trail, "members")

    def check_generation(self, now: bool = False) -> None:
        super().check_generation(now)
        self.members.started_over = True  # type: ignore[attr-defined]
        self.workers = [WorkerId("w5"), WorkerId("w6")]


def test_a_loss_the_redis_rebuild_already_handled_is_not_planned_or_charged_again() -> None:
    """Chaos schedule 1: w1, the last member, was declared lost; the loss's generation check found Redis
    empty, no member answered the rollback, and a new set started from the checkpoint. recover then went
    on, planned w1's loss on the new set and charged it a second time, spending the restart budget."""
    c = StartedOverCoordinator()
    recover(cast(Coordinator, c), W1, "peer-gc")
    assert "tables.snapshot" not in c.trail and "members.schedule_replacement" not in c.trail, c.trail
    assert "journal.append" not in c.trail, c.trail
