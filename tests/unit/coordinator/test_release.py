"""Releasing committed steps: in order, only after their commits are in the log, and deferred
(not failed) when every worker has just died, since the rollback that follows releases them again."""

from __future__ import annotations

from typing import Any

import pytest

from ftpipeline.coordinator.coordinator import Coordinator
from ftpipeline.obs.phases import StepPhases
from ftpipeline.coordinator.errors import PipelineFailed
from ftpipeline.coordinator.release import RELEASE_RETRY_S, release_committed
from ftpipeline.obs.metrics import RunMetrics


class Journal:
    def __init__(self, events: list[str]) -> None:
        self.events = events

    def settle(self) -> None:
        self.events.append("settle")


class Members:
    def __init__(self, events: list[str]) -> None:
        self.events, self.answering = events, True

    def call_any(self, action: str, body: dict[str, Any], what: str) -> Any:
        if not self.answering:
            raise PipelineFailed(f"no worker could {what} (last: w0: KafkaReleaseError: fenced)")
        self.events.append(f"{action} {body['step']}")
        return self.answer

    answer: dict[str, Any] = {}

    def hand_back(self, placement: Any, is_stateful: Any) -> tuple[Any, Any]:
        return placement, {}


class Anything:
    """Collaborators whose calls this test does not look at."""

    busy = True

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def coordinator(events: list[str]) -> tuple[Coordinator, Members, Clock]:
    c = Coordinator.__new__(Coordinator)
    members, clock = Members(events), Clock()
    c.journal, c.members, c.clock = Journal(events), members, clock  # type: ignore[assignment]
    c.store = c.observer = c.ckpt = c.control = Anything()  # type: ignore[assignment]
    c.metrics = RunMetrics("release-test")
    c.released, c.sample_every, c.stall_timeout_s = 0, 0, 60.0
    c._unreleased, c._release_retry_at, c._release_failing_since, c._release_error = [], 0.0, 0.0, ""
    c._step_started, c._step_rows, c._step_seconds, c._commit_at = {}, {}, [], []
    c._started_at, c.awaiting_commit = 0.0, []
    c.phases = StepPhases()
    return c, members, clock


def test_steps_are_released_in_order_after_the_log_took_their_commits() -> None:
    events: list[str] = []
    c, _, _ = coordinator(events)
    c._unreleased = [1, 2]
    release_committed(c)
    assert events == ["settle", "release 1", "release 2"]
    assert c.released == 2 and c._unreleased == [] and len(c._step_seconds) == 2


def test_with_no_worker_answering_the_release_waits_and_is_tried_again() -> None:
    events: list[str] = []
    c, members, clock = coordinator(events)
    members.answering = False
    c._unreleased = [3, 4]
    release_committed(c)  # every worker just died: no failure, nothing released
    assert c.released == 0 and c._unreleased == [3, 4] and c._step_seconds == []
    events.clear()
    release_committed(c)  # too soon: not tried again
    assert events == []
    clock.now += RELEASE_RETRY_S
    members.answering = True  # a survivor (or a replacement) answers
    release_committed(c)
    assert events == ["settle", "release 3", "release 4"] and c.released == 4


def test_a_release_no_worker_can_do_for_the_stall_timeout_fails_the_run_naming_why() -> None:
    c, members, clock = coordinator([])
    members.answering = False
    c._unreleased = [5]
    release_committed(c)
    clock.now += c.stall_timeout_s + 1
    with pytest.raises(PipelineFailed, match=r"^releasing step 5 stalled for 60s: no worker could release step 5 "
                                             r"\(last: w0: KafkaReleaseError: fenced\)$"):
        release_committed(c)


class Plane:
    """The control plane's state as the coordinator reports it (``outages.py``)."""

    def __init__(self) -> None:
        self.down: dict[str, str] = {}

    def unavailable(self, component: str, why: str) -> None:
        self.down[component] = why

    def recovered(self, component: str) -> None:
        self.down.pop(component, None)


def test_a_kafka_cluster_out_of_reach_pauses_the_release_without_failing_it() -> None:
    events: list[str] = []
    c, members, clock = coordinator(events)
    plane = Plane()
    c.control = plane  # type: ignore[assignment]
    members.answer = {"unavailable": "kafka", "error": "sink out: _TRANSPORT: broker down"}
    c._unreleased = [7]
    for _ in range(5):  # longer than the stall timeout: an outage is waited out, not a stall
        release_committed(c)
        clock.now += c.stall_timeout_s
    assert c.released == 0 and c._unreleased == [7]
    assert plane.down == {"kafka": "sink out: _TRANSPORT: broker down"}
    members.answer = {}
    release_committed(c)
    assert c.released == 7 and plane.down == {}
