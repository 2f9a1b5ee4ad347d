"""Releasing committed steps (``release.Releases``, with fakes of the collaborators it calls): in order, only
after their commits are in the log, and deferred (not failed) when every worker has just died, since the
rollback that follows releases them again."""

from __future__ import annotations

from typing import Any

import pytest

from ftpipeline.coordinator.errors import PipelineFailed
from ftpipeline.coordinator.release import RELEASE_RETRY_S, Releases
from ftpipeline.obs.phases import StepPhases


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


class Store:
    def commit(self, step: int) -> None:
        pass

    def step(self, step: int) -> None:
        return None


class Plane:
    """The control plane's state as the coordinator reports it (``outages.py``)."""

    def __init__(self) -> None:
        self.down: dict[str, str] = {}

    def unavailable(self, component: str, why: str) -> None:
        self.down[component] = why

    def recovered(self, component: str) -> None:
        self.down.pop(component, None)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


STALL_S = 60.0


def releases(events: list[str]) -> tuple[Releases, Members, Clock, Plane, list[int]]:
    """The protocol with fakes of the collaborators it calls, and the steps it said were released."""
    members, clock, plane, released = Members(events), Clock(), Plane(), list[int]()
    r = Releases(members, Store(), Journal(events), plane, StepPhases(), STALL_S, clock)  # type: ignore[arg-type]
    return r, members, clock, plane, released


def test_steps_are_released_in_order_after_the_log_took_their_commits() -> None:
    events: list[str] = []
    r, _, _, _, released = releases(events)
    r.decided(1)
    r.decided(2)
    r.release_ready(released.append)
    assert events == ["settle", "release 1", "release 2"]
    assert r.released == 2 and r.pending == [] and released == [1, 2]


def test_with_no_worker_answering_the_release_waits_and_is_tried_again() -> None:
    events: list[str] = []
    r, members, clock, _, released = releases(events)
    members.answering = False
    r.pending = [3, 4]
    r.release_ready(released.append)  # every worker just died: no failure, nothing released
    assert r.released == 0 and r.pending == [3, 4] and released == []
    events.clear()
    r.release_ready(released.append)  # too soon: not tried again
    assert events == []
    clock.now += RELEASE_RETRY_S
    members.answering = True  # a survivor (or a replacement) answers
    r.release_ready(released.append)
    assert events == ["settle", "release 3", "release 4"] and r.released == 4 and released == [3, 4]


def test_a_release_no_worker_can_do_for_the_stall_timeout_fails_the_run_naming_why() -> None:
    r, members, clock, _, released = releases([])
    members.answering = False
    r.decided(5)
    r.release_ready(released.append)
    clock.now += STALL_S + 1
    with pytest.raises(PipelineFailed, match=r"^releasing step 5 stalled for 60s: no worker could release step 5 "
                                             r"\(last: w0: KafkaReleaseError: fenced\)$"):
        r.release_ready(released.append)


def test_a_kafka_cluster_out_of_reach_pauses_the_release_without_failing_it() -> None:
    events: list[str] = []
    r, members, clock, plane, released = releases(events)
    members.answer = {"unavailable": "kafka", "error": "sink out: _TRANSPORT: broker down"}
    r.decided(7)
    for _ in range(5):  # longer than the stall timeout: an outage is waited out, not a stall
        r.release_ready(released.append)
        clock.now += STALL_S
    assert r.released == 0 and r.pending == [7] and released == []
    assert plane.down == {"kafka": "sink out: _TRANSPORT: broker down"}
    members.answer = {}
    r.release_ready(released.append)
    assert r.released == 7 and plane.down == {} and released == [7]
