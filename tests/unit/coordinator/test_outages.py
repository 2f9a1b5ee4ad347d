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
