"""A worker kept after its heartbeat expired must come back into the ring, or be found dead.

Chaos schedule 21 of seed 0 (a 18 s ZooKeeper cut, then a zombie): every
session expired, the ring reported w1, w1 answered and was kept; it was
stopped before it re-registered, so no heartbeat of it existed for anyone to
watch, and the run waited for it until its progress deadline failed it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ftpipeline.coordinator.detection import Detection
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


class Members:
    def __init__(self, workers: dict[WorkerId, Worker]) -> None:
        self.workers, self._clients = list(workers), workers

    def client(self, worker: WorkerId) -> Worker:
        return self._clients[worker]


class Lost:
    """The coordinator's side: the losses it was told of."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster, self.workers = cluster, list[WorkerId]()

    def __call__(self, worker: WorkerId, reason: str, how: str) -> None:
        assert worker not in self.cluster.killed, "fenced (recovered around) before it is killed or woken"
        self.workers.append(worker)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def detection(ring: dict[str, str], workers: dict[WorkerId, Worker], zookeeper_up: bool = True
              ) -> tuple[Detection, Lost, Cluster, Clock]:
    """The protocol with fakes of what it calls."""
    cluster, clock = Cluster(), Clock()
    lost = Lost(cluster)
    found = Detection(Spec(), Members(workers), Journal(Follower(State(ring))), Control(zookeeper_up),  # type: ignore[arg-type]
                      cluster, Metrics(), clock, lost)  # type: ignore[arg-type]
    return found, lost, cluster, clock


def test_a_kept_worker_that_never_rejoined_and_stopped_answering_is_declared_lost() -> None:
    d, lost, cluster, clock = detection({"w0.b": "w0", "w2.c": "w2"},
                                        {W0: Worker(True), W1: Worker(False), W2: Worker(True)})
    d.probation[W1] = 105.0
    d.follow_rejoins()
    assert lost.workers == [], "not before its window is over"
    clock.now = 106.0
    d.follow_rejoins()
    assert lost.workers == [W1] and cluster.killed == [W1] and d.heartbeat_losses == 1
    assert W1 not in d.probation


def test_a_kept_worker_back_in_the_ring_leaves_probation_uncalled() -> None:
    w1 = Worker(False)
    d, lost, _, _ = detection({"w0.b": "w0", "w1.d": "w1", "w2.c": "w2"}, {W0: Worker(True), W1: w1, W2: Worker(True)})
    d.probation[W1] = 50.0
    d.follow_rejoins()
    assert lost.workers == [] and w1.calls == 0 and not d.probation


def test_a_kept_worker_that_answers_gets_more_time() -> None:
    d, lost, _, clock = detection({"w0.b": "w0"}, {W0: Worker(True), W1: Worker(True)})
    d.probation[W1] = 50.0
    d.follow_rejoins()
    assert lost.workers == [] and d.probation[W1] > clock.now


def test_nothing_is_decided_while_zookeeper_is_out_of_reach() -> None:
    w1 = Worker(False)
    d, lost, _, _ = detection({"w0.b": "w0"}, {W0: Worker(True), W1: w1}, zookeeper_up=False)
    d.probation[W1] = 50.0
    d.follow_rejoins()
    assert lost.workers == [] and w1.calls == 0 and W1 in d.probation
