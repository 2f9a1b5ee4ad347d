"""Control-plane outages as states: AVAILABLE -> UNAVAILABLE (reported once) -> AVAILABLE (with its length)."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from ftpipeline.commandlog.zkclient import UNREACHABLE
from ftpipeline.coordinator.outages import Backoff, ControlPlane
from ftpipeline.obs.metrics import RunMetrics
from kazoo.exceptions import ConnectionLoss


class Reports:
    def __init__(self) -> None:
        self.seen: list[tuple[str, bool, str]] = []

    def on_control_plane(self, component: str, available: bool, message: str) -> None:
        self.seen.append((component, available, message))


def _plane(check_stop: Any = lambda: None) -> tuple[ControlPlane, Reports, RunMetrics, list[float]]:
    now = [0.0]
    metrics = RunMetrics("p", CollectorRegistry())
    reports = Reports()

    def sleep(s: float) -> None:
        now[0] += s

    plane = ControlPlane(metrics.control_plane_faults, "p", reports, check_stop, Backoff(0.1, 2.0, 1.0),
                         clock=lambda: now[0], sleep=sleep)
    return plane, reports, metrics, now


def _count(metrics: RunMetrics, outcome: str) -> float:
    return metrics.registry.get_sample_value("ftpipeline_control_plane_faults_total",
                                             {"pipeline": "p", "component": "zookeeper", "outcome": outcome}) or 0.0


def test_a_call_waits_through_the_outage_and_reports_it_once() -> None:
    plane, reports, metrics, now = _plane()
    tries: list[float] = []

    def append() -> int:
        tries.append(now[0])
        if len(tries) < 6:
            raise ConnectionLoss()
        return 42

    assert plane.call("zookeeper", append, UNREACHABLE, "appending step-started") == 42
    assert [round(t, 2) for t in tries] == [0.0, 0.1, 0.3, 0.7, 1.5, 2.5]  # backoff capped at 1 s
    assert [(c, a) for c, a, _ in reports.seen] == [("zookeeper", False), ("zookeeper", True)]
    assert "appending step-started" in reports.seen[0][2] and "2.5 s" in reports.seen[1][2]
    assert (_count(metrics, "paused"), _count(metrics, "resumed")) == (1, 1)
    assert plane.outages == [{"component": "zookeeper", "seconds": 2.5, "outcome": "resumed"}]
    assert plane.available("zookeeper")


def test_a_stop_request_ends_the_wait_and_nothing_else_does() -> None:
    class Stop(Exception):
        pass

    asked = {"n": 0}

    def check_stop() -> None:
        asked["n"] += 1
        if asked["n"] == 3:
            raise Stop

    plane, _, _, _ = _plane(check_stop)

    def never() -> None:
        raise ConnectionLoss()

    with pytest.raises(Stop):
        plane.call("zookeeper", never, UNREACHABLE)
    assert not plane.available("zookeeper")


def test_other_errors_are_not_outages() -> None:
    plane, reports, _, _ = _plane()

    def broken() -> None:
        raise ValueError("a bug, not an outage")

    with pytest.raises(ValueError):
        plane.call("zookeeper", broken, UNREACHABLE)
    assert reports.seen == []


class FakeZooKeeper:
    """Only the listener registry of a kazoo client: the state changes are the test's to make."""

    def __init__(self) -> None:
        self.listeners: list[Any] = []

    def add_listener(self, listener: Any) -> None:
        self.listeners.append(listener)

    def remove_listener(self, listener: Any) -> None:
        self.listeners.remove(listener)

    def change(self, state: str) -> None:
        for listener in list(self.listeners):
            listener(state)


def test_session_state_changes_are_reported_in_order_in_the_watchers_context() -> None:
    """Blips in quick succession: each report comes in the order of the changes, and with the context
    variables of the thread that started watching (an operator's Event API reads its settings there)."""
    import contextvars
    import threading

    settings: contextvars.ContextVar[str] = contextvars.ContextVar("settings")
    settings.set("operator")
    plane, reports, _, _ = _plane()
    seen_in: list[str] = []
    done = threading.Event()
    record = reports.on_control_plane

    def on_control_plane(component: str, available: bool, message: str) -> None:
        seen_in.append(settings.get())  # LookupError outside the watcher's context
        record(component, available, message)
        if len(reports.seen) == 40:
            done.set()

    reports.on_control_plane = on_control_plane  # type: ignore[method-assign]
    zk = FakeZooKeeper()
    plane.watch_zookeeper(zk)
    for _ in range(20):
        zk.change("SUSPENDED")
        zk.change("CONNECTED")
    assert done.wait(5), reports.seen
    assert [available for _, available, _ in reports.seen] == [False, True] * 20
    assert set(seen_in) == {"operator"}
    plane.unwatch()
    assert zk.listeners == []
