"""Members: start-up failures name their cause, replacements wait for their backoff and a commit, the budget ends a run."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import pytest

from ftpipeline.cluster.base import ClusterBackend
from ftpipeline.control.store import RunStore
from ftpipeline.coordinator.errors import PipelineFailed
from ftpipeline.coordinator.members import Members
from ftpipeline.lineage.naming import WorkerId
from ftpipeline.spec.load import parse_pipeline
from tests.unit.lineage.history import PIPELINE


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Cluster(ClusterBackend):
    """Records starts; reports as lost whatever the test says."""

    def __init__(self) -> None:
        self.started: list[WorkerId] = []
        self.gone: list[WorkerId] = []

    def start_worker(self, worker: WorkerId) -> None:
        self.started.append(worker)

    def kill_worker(self, worker: WorkerId) -> None:
        self.gone.append(worker)

    def why(self, worker: WorkerId) -> str:
        return "ImagePull in container sidecar: pull access denied for nosuch/image"

    def lost(self) -> list[WorkerId]:
        out, self.gone = self.gone, []
        return out

    def stop(self) -> None:
        pass


class Store:
    """The events a RunStore would deliver: 'joined' for the workers named."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.events: list[dict[str, Any]] = []

    def receive(self, timeout_s: float) -> list[dict[str, Any]]:
        self.clock.now += timeout_s
        out, self.events = self.events, []
        return out


def members(tmp_path: Path, clock: Clock, cluster: Cluster, **spec: Any) -> tuple[Members, Store]:
    s = replace(parse_pipeline(PIPELINE, tmp_path, check_entry_point=False), **spec)
    store = Store(clock)
    return Members(s, cluster, cast(RunStore, store), clock), store


def test_a_worker_lost_during_start_up_fails_the_run_naming_why(tmp_path: Path) -> None:
    clock, cluster = Clock(), Cluster()
    m, store = members(tmp_path, clock, cluster, workers=2)
    store.events = [{"t": "joined", "w": "w0"}]
    cluster.gone = [WorkerId("w1")]
    with pytest.raises(PipelineFailed, match="worker w1 was lost during start-up: ImagePull in container sidecar"):
        m.start_initial(60, lambda *_: None, lambda _: None, lambda: None)


def test_start_up_waits_for_every_worker_then_they_are_members(tmp_path: Path) -> None:
    clock, cluster = Clock(), Cluster()
    m, store = members(tmp_path, clock, cluster, workers=2)
    joined: list[tuple[str, int, int]] = []
    store.events = [{"t": "joined", "w": "w1"}, {"t": "joined", "w": "w0"}, {"t": "joined", "w": "w7"}]
    m.start_initial(60, lambda w, r, t: joined.append((w, r, t)), lambda _: None, lambda: None)
    assert m.workers == ["w0", "w1"] and m.joining == []
    assert joined == [("w1", 1, 2), ("w0", 2, 2)]


def test_start_up_times_out_naming_who_joined(tmp_path: Path) -> None:
    clock, cluster = Clock(), Cluster()
    m, store = members(tmp_path, clock, cluster, workers=2)
    store.events = [{"t": "joined", "w": "w0"}]
    with pytest.raises(PipelineFailed, match=r"did not start within 1s \(joined: w0\)"):
        m.start_initial(1, lambda *_: None, lambda _: None, lambda: None)


def test_a_replacement_starts_after_its_backoff_and_a_commit_since_the_loss(tmp_path: Path) -> None:
    clock, cluster = Clock(), Cluster()
    m, _ = members(tmp_path, clock, cluster, backoff_initial_ms=1000, backoff_jitter_percent=0)
    m.schedule_replacement(clock(), committed=4)
    clock.now += 2.0
    m.start_replacements(committed=4)
    assert cluster.started == [], "no step committed since the loss"
    m.start_replacements(committed=5)
    assert cluster.started == ["w0"] and m.joining == ["w0"]


def test_a_replacement_lost_before_joining_is_tried_again_and_the_budget_ends_the_run(tmp_path: Path) -> None:
    clock, cluster = Clock(), Cluster()
    m, _ = members(tmp_path, clock, cluster, restart_max=2, backoff_initial_ms=0, backoff_jitter_percent=0)
    m.schedule_replacement(clock(), committed=0)
    m.start_replacements(committed=1)
    assert m.lost_while_joining(WorkerId("w0"), clock(), committed=1)
    assert not m.lost_while_joining(WorkerId("w0"), clock(), committed=1), "reported once"
    cause = "worker w0 lost (ApplicationError in container spark: spec.stages[1].transform.function: no 'f')"
    with pytest.raises(PipelineFailed, match="exceed the restart budget of 2") as spent:
        m.schedule_replacement(clock(), committed=1, cause=cause)
    assert str(spent.value).startswith(cause), "the loss that spent the budget is named, with its remedy"


def test_a_replacement_whose_registration_redis_lost_is_started_again_without_charging_the_budget(
        tmp_path: Path) -> None:
    """Chaos schedule 1: Redis restarted empty while two replacements were joining; charged, those two
    and the workers lost before them spent the budget of five, and the run failed."""
    clock, cluster = Clock(), Cluster()
    m, _ = members(tmp_path, clock, cluster, restart_max=1, backoff_initial_ms=0, backoff_jitter_percent=0)
    m.schedule_replacement(clock(), committed=0)  # the budget's one loss
    m.start_replacements(committed=1)
    for committed in (1, 2, 3):
        worker = m.joining[0]
        m.requeue(worker, clock(), committed)
        assert m.joining == []
        m.start_replacements(committed)
        assert m.joining == [], "another starts after the next commit"
        m.start_replacements(committed + 1)
        assert len(m.joining) == 1 and m.joining[0] != worker
    with pytest.raises(PipelineFailed, match="exceed the restart budget of 1"):
        m.schedule_replacement(clock(), committed=4)  # a worker's own loss is still charged


class _Refusing:
    """A sidecar client whose every call fails as a sink refusing the release would."""

    def __init__(self, worker: str) -> None:
        self.worker = worker

    def call(self, action: str, body: dict[str, Any] | None = None, timeout_s: float | None = None) -> Any:
        if action == "state":  # it answers: it is there, it just cannot release
            return {}
        raise RuntimeError(f"KafkaReleaseError: sink out: cannot release step 2 of channel 0 ({self.worker})")


def test_a_call_no_member_can_do_names_the_last_error(tmp_path: Path) -> None:
    """What a stalled release reports: every member asked, and why the last one could not."""
    m, _ = members(tmp_path, Clock(), Cluster(), workers=2)
    m.workers = [WorkerId("w0"), WorkerId("w1")]
    m.client = lambda w: cast(Any, _Refusing(w))  # type: ignore[method-assign]
    with pytest.raises(PipelineFailed, match=r"no worker could release step 2 \(last: w1: RuntimeError: "
                                             r"KafkaReleaseError: .*\(w1\)\)"):
        m.call_any("release", {"step": 2}, "release step 2")


class _Silent:
    """A worker whose node is gone: no call is ever answered (each records how long it would have waited)."""

    def __init__(self, log: list[tuple[str, str, float | None]], worker: str, silent: bool) -> None:
        self.log, self.worker, self.silent = log, worker, silent

    def call(self, action: str, body: dict[str, Any] | None = None, timeout_s: float | None = None) -> Any:
        self.log.append((self.worker, action, timeout_s))
        if self.silent:
            raise TimeoutError(f"{self.worker} did not answer {action!r}")
        return {"bytes": 7}


def test_a_call_any_member_can_do_skips_a_silent_one_after_a_short_question(tmp_path: Path) -> None:
    """A silent member is asked only briefly (its node may be gone): the full call goes to the next one."""
    m, _ = members(tmp_path, Clock(), Cluster(), workers=2)
    m.workers = [WorkerId("w0"), WorkerId("w1")]
    log: list[tuple[str, str, float | None]] = []
    m.client = lambda w: cast(Any, _Silent(log, w, silent=w == "w0"))  # type: ignore[method-assign]
    assert m.call_any("publish_checkpoint", {}, "publish") == {"bytes": 7}
    assert log == [("w0", "state", 2), ("w1", "state", 2), ("w1", "publish_checkpoint", None)]


class _Hung(_Silent):
    """A worker that answers its state but not the action (its sidecar's Kafka client hangs)."""

    def call(self, action: str, body: dict[str, Any] | None = None, timeout_s: float | None = None) -> Any:
        self.log.append((self.worker, action, timeout_s))
        if self.silent and action != "state":
            raise TimeoutError(f"{self.worker} did not answer {action!r}")
        return {"bytes": 7}


def test_a_call_any_member_can_do_asks_the_one_that_answered_last_first(tmp_path: Path) -> None:
    """After w0 failed the action once, later calls go to w1 at once: w0 is not given each call's deadline again
    (asked last, it is still asked once w1 is gone)."""
    m, _ = members(tmp_path, Clock(), Cluster(), workers=2)
    m.workers = [WorkerId("w0"), WorkerId("w1")]
    log: list[tuple[str, str, float | None]] = []
    m.client = lambda w: cast(Any, _Hung(log, w, silent=w == "w0"))  # type: ignore[method-assign]
    for step in (1, 2, 3):
        assert m.call_any("release", {"step": step}, f"release step {step}") == {"bytes": 7}
    assert [(w, a) for w, a, _ in log if a == "release"] == [("w0", "release"), ("w1", "release"),
                                                             ("w1", "release"), ("w1", "release")]
    m.workers = [WorkerId("w0")]
    with pytest.raises(PipelineFailed, match="no worker could release step 4"):
        m.call_any("release", {"step": 4}, "release step 4")


def test_a_fanned_out_call_waits_no_longer_than_a_heartbeat_timeout(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import ftpipeline.coordinator.members as members_module

    monkeypatch.setattr(members_module, "SidecarClient", _Silent)  # what call_all takes for a reachable client
    m, _ = members(tmp_path, Clock(), Cluster(), workers=2, heartbeat_timeout_ms=4000)
    m.workers = [WorkerId("w0"), WorkerId("w1")]
    log: list[tuple[str, str, float | None]] = []
    m.client = lambda w: cast(Any, _Silent(log, w, silent=w == "w0"))  # type: ignore[method-assign]
    answers = m.call_all(m.workers, "step", {"step": 3})
    assert isinstance(answers[WorkerId("w0")], TimeoutError) and answers[WorkerId("w1")] == {"bytes": 7}
    assert sorted(log) == [("w0", "step", 4.0), ("w1", "step", 4.0)]
