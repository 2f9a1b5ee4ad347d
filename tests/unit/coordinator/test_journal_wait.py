"""Waiting for a command sent ahead: held through an outage, cut short by a stop request.

kazoo holds a request made while ZooKeeper is out of reach until the session
is back. Appending it again after a timeout would log it twice once the held
one lands, so the wait goes on while the outage lasts; a stop request ends it.
"""

from __future__ import annotations

from typing import Any

import pytest
from kazoo.handlers.threading import KazooTimeoutError

from ftpipeline.coordinator import journal as journal_module
from ftpipeline.coordinator.errors import Interrupted
from ftpipeline.coordinator.journal import Journal
from ftpipeline.obs.metrics import RunMetrics


class Held:
    """A send kazoo holds for ``slices`` waits, then ZooKeeper takes it."""

    def __init__(self, slices: int) -> None:
        self.slices = slices

    def get(self, timeout: float | None = None) -> str:
        if self.slices > 0:
            self.slices -= 1
            raise KazooTimeoutError()
        return "/ftpipeline/p/log/c-0000000001"


class Log:
    def __init__(self, sent: Held) -> None:
        self.sent, self.appended = sent, []  # type: tuple[Held, list[str]]

    def append_async(self, kind: str, **body: Any) -> Held:
        return self.sent

    def append(self, kind: str, **body: Any) -> int:
        self.appended.append(kind)
        return 1


class Control:
    def __init__(self, zookeeper_up: bool, stop_after: int | None = None) -> None:
        self.zookeeper_up, self.stop_after, self.checks = zookeeper_up, stop_after, 0

    def available(self, component: str) -> bool:
        return self.zookeeper_up

    def check_stop(self) -> None:
        self.checks += 1
        if self.stop_after is not None and self.checks >= self.stop_after:
            raise Interrupted("stop requested")

    def call(self, component: str, fn: Any, unreachable: Any, what: str = "") -> Any:
        return fn()


def journal(log: Log, control: Control) -> Journal:
    return Journal(log, tables=None, store=None, metrics=RunMetrics("wait-test"),  # type: ignore[arg-type]
                   pipeline="wait-test", control=control)  # type: ignore[arg-type]


@pytest.fixture(autouse=True)
def short_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(journal_module, "SETTLE_TIMEOUT_S", 0.0)  # the first slice without an answer is too long


def test_a_send_held_through_an_outage_is_waited_for_not_appended_twice() -> None:
    log = Log(Held(slices=5))
    j = journal(log, Control(zookeeper_up=False))
    j.append_ahead("step-committed", step=1)
    j.settle()
    assert log.appended == [] and j.unsettled == 0 and j._appended == 1


def test_a_send_that_hangs_while_zookeeper_is_up_is_appended_again() -> None:
    log = Log(Held(slices=5))
    j = journal(log, Control(zookeeper_up=True))
    j.append_ahead("step-committed", step=1)
    j.settle()
    assert log.appended == ["step-committed"]


def test_a_stop_request_ends_the_wait() -> None:
    log = Log(Held(slices=1000))
    control = Control(zookeeper_up=False, stop_after=3)
    j = journal(log, control)
    j.append_ahead("step-committed", step=1)
    with pytest.raises(Interrupted):
        j.settle()
    assert control.checks == 3 and log.appended == []
