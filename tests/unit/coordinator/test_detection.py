"""A worker kept after its heartbeat expired must come back into the ring, or be found dead.

Chaos schedule 21 of seed 0 (a 18 s ZooKeeper cut, then a zombie): every
session expired, the ring reported w1, w1 answered and was kept; it was
stopped before it re-registered, so no heartbeat of it existed for anyone to
watch, and the run waited for it until its progress deadline failed it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

from ftpipeline.coordinator.coordinator import Coordinator
from ftpipeline.coordinator.detection import follow_rejoins
from ftpipeline.lineage.naming import WorkerId
from ftpipeline.worker.transport import Unreachable

W0, W1, W2 = WorkerId("w0"), WorkerId("w1"), WorkerId("w2")


class Worker:
    def __init__(self, answers: bool) -> None:
        self.answers, self.calls = answers, 0

    def call(self, action: str, body: object = None, timeout_s: float | None = None) -> dict[str, Any]:
        self.calls += 1
        if not self.answers:
            raise Unreachable("127.0.0.1:1", action, TimeoutError("timed out"))
        return {"state": "running"}


@dataclass
class State:
    members: dict[str, str]


@dataclass
class Follower:
    state: State


@dataclass
class Journal:
    follower: Follower


class Control:
    def __init__(self, zookeeper_up: bool) -> None:
        self.up = zookeeper_up

    def available(self, component: str) -> bool:
        return self.up


@dataclass
class Cluster:
    killed: list[WorkerId] = field(default_factory=list)

    def declare_lost(self, worker: WorkerId, why: str) -> None:
        pass

    def kill_worker(self, worker: WorkerId) -> None:
        self.killed.append(worker)


class Counter:
    def inc(self) -> None:
        pass


class Metrics:
    heartbeat_losses = Counter()


class Spec:
    heartbeat_timeout_ms = 3000


class FakeCoordinator:
    def __init__(self, ring: dict[str, str], workers: dict[WorkerId, Worker], zookeeper_up: bool = True) -> None:
        self.journal = Journal(Follower(State(ring)))
        self.control = Control(zookeeper_up)
        self.cluster = Cluster()
        self.metrics = Metrics()
        self.spec = Spec()
        self.probation: dict[WorkerId, float] = {}
        self.workers = list(workers)
        self._clients = workers
        self.now = 100.0
        self.heartbeat_losses = 0
        self.lost_workers: list[WorkerId] = []

    def clock(self) -> float:
        return self.now

    def client(self, worker: WorkerId) -> Worker:
        return self._clients[worker]

    def lost(self, worker: WorkerId, reason: str, how: str = "") -> None:
        assert worker not in self.cluster.killed, "fenced (recovered around) before it is killed or woken"
        self.lost_workers.append(worker)


def test_a_kept_worker_that_never_rejoined_and_stopped_answering_is_declared_lost() -> None:
    c = FakeCoordinator({"w0.b": "w0", "w2.c": "w2"}, {W0: Worker(True), W1: Worker(False), W2: Worker(True)})
    c.probation[W1] = 105.0
    follow_rejoins(cast(Coordinator, c))
    assert c.lost_workers == [], "not before its window is over"
    c.now = 106.0
    follow_rejoins(cast(Coordinator, c))
    assert c.lost_workers == [W1] and c.cluster.killed == [W1] and c.heartbeat_losses == 1
    assert W1 not in c.probation


def test_a_kept_worker_back_in_the_ring_leaves_probation_uncalled() -> None:
    w1 = Worker(False)
    c = FakeCoordinator({"w0.b": "w0", "w1.d": "w1", "w2.c": "w2"}, {W0: Worker(True), W1: w1, W2: Worker(True)})
    c.probation[W1] = 50.0
    follow_rejoins(cast(Coordinator, c))
    assert c.lost_workers == [] and w1.calls == 0 and not c.probation


def test_a_kept_worker_that_answers_gets_more_time() -> None:
    c = FakeCoordinator({"w0.b": "w0"}, {W0: Worker(True), W1: Worker(True)})
    c.probation[W1] = 50.0
    follow_rejoins(cast(Coordinator, c))
    assert c.lost_workers == [] and c.probation[W1] > c.now


def test_nothing_is_decided_while_zookeeper_is_out_of_reach() -> None:
    w1 = Worker(False)
    c = FakeCoordinator({"w0.b": "w0"}, {W0: Worker(True), W1: w1}, zookeeper_up=False)
    c.probation[W1] = 50.0
    follow_rejoins(cast(Coordinator, c))
    assert c.lost_workers == [] and w1.calls == 0 and W1 in c.probation
