"""Fanout: every callback to every observer, whatever its arguments; a failing watcher never stops the run."""

from __future__ import annotations

from typing import Any

import pytest

from ftpipeline.coordinator.coordinator import Observer
from ftpipeline.coordinator.trigger import Reason
from ftpipeline.lineage.naming import WorkerId
from ftpipeline.report.fanout import Fanout


class Recorder(Observer):
    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def on_step_started(self, step: int, reason: Reason, rows: int) -> None:
        self.calls.append(("on_step_started", (step, reason, rows), {}))

    def on_worker_lost(self, worker: WorkerId, *args: Any, **kwargs: Any) -> None:
        self.calls.append(("on_worker_lost", (worker, *args), kwargs))


class Broken(Observer):
    def on_step_started(self, step: int, reason: Reason, rows: int) -> None:
        raise RuntimeError("a bug in the report")


def test_each_callback_reaches_every_observer_with_its_arguments() -> None:
    a, b = Recorder(), Recorder()
    fan = Fanout(a, b)
    fan.on_step_started(3, Reason.TIMER, 10)
    fan.on_worker_lost(WorkerId("w1"), detected_by="heartbeat")  # a keyword the Observer may gain later
    fan.on_checkpoint({"epoch": 1})  # neither overrides it: Observer's no-op
    expected = [("on_step_started", (3, Reason.TIMER, 10), {}),
                ("on_worker_lost", ("w1",), {"detected_by": "heartbeat"})]
    assert a.calls == b.calls == expected


def test_a_failing_watcher_is_logged_and_the_others_still_hear(caplog: pytest.LogCaptureFixture) -> None:
    after = Recorder()
    fan = Fanout(Recorder(), Broken(), after)
    fan.on_step_started(1, Reason.RECORDS, 1)
    fan.on_step_started(2, Reason.RECORDS, 1)
    assert [c[1][0] for c in after.calls] == [1, 2]
    assert len([r for r in caplog.records if "an observer failed" in r.message]) == 1  # once per callback


def test_what_the_primary_raises_reaches_the_coordinator() -> None:
    with pytest.raises(RuntimeError, match="a bug in the report"):
        Fanout(Broken(), Recorder()).on_step_started(1, Reason.RECORDS, 1)


def test_a_bound_callback_taken_early_still_fans_out() -> None:
    """The coordinator keeps ``observer.on_checkpoint_aborted`` as a hook of its checkpoint manager."""
    a, b = Recorder(), Recorder()
    hook = Fanout(a, b).on_worker_lost
    hook(WorkerId("w2"))
    assert a.calls == b.calls == [("on_worker_lost", ("w2",), {})]
