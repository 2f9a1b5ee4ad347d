"""The coordinator's journal on a real ZooKeeper: commands sent ahead keep the log's order."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss

from ftpipeline.commandlog.state import fold
from ftpipeline.commandlog.zklog import CommandLog, Deposed
from ftpipeline.coordinator.journal import Journal
from ftpipeline.obs.metrics import RunMetrics


@pytest.fixture
def zk(zookeeper: str) -> Iterator[KazooClient]:
    c = KazooClient(hosts=zookeeper, timeout=10.0)
    c.start(timeout=10)
    yield c
    c.stop()
    c.close()


def journal(log: CommandLog) -> Journal:
    return Journal(log, tables=None, store=None, metrics=RunMetrics("journal-test"),  # type: ignore[arg-type]
                   pipeline="journal-test")


def kinds(log: CommandLog) -> list[tuple[str, Any]]:
    commands = log.read_after(-1)
    assert commands is not None
    return [(c.kind, c.body.get("step")) for c in commands]


def test_starts_and_commits_sent_ahead_land_in_the_order_sent(zk: KazooClient) -> None:
    log = CommandLog(zk, f"journal{uuid.uuid4().hex[:8]}")
    j = journal(log)
    j.append_ahead("step-started", step=1, offsets={"events.0": [0, 1]})
    for step in range(1, 31):
        # as the coordinator does: a step's commit, then the next step's start, both in flight
        j.append_ahead("step-committed", step=step)
        j.append_ahead("step-started", step=step + 1, offsets={"events.0": [step, step + 1]})
        assert j.unsettled == (3 if step == 1 else 2)
        j.settle()  # before the step's output is released
        assert j.unsettled == 0
    j.append("suspended", reason="test")
    expected = [(k, s) for step in range(1, 31) for k, s in (("step-started", step), ("step-committed", step))]
    assert kinds(log) == expected + [("step-started", 31), ("suspended", None)]
    state = log.load()
    assert state.committed == 30 and state.started[31] == {"events.0": (30, 31)}
    assert j._appended == 62


class Lost:
    """A send whose connection dropped: ZooKeeper may or may not have taken it (the test decides
    whether the real send went out)."""

    def get(self, timeout: float | None = None) -> str:
        raise ConnectionLoss()


def test_a_start_whose_send_was_lost_is_appended_again_before_the_commit(zk: KazooClient) -> None:
    log = CommandLog(zk, f"journal{uuid.uuid4().hex[:8]}")
    j = journal(log)
    j.append_ahead("step-started", step=1, offsets={"events.0": [0, 5]})
    j.append("step-committed", step=1)
    real = log.append_async
    log.append_async = lambda kind, **body: (real(kind, **body), Lost())[1]  # type: ignore[method-assign]
    j.append_ahead("step-started", step=2, offsets={"events.0": [5, 9]})  # taken, but reported lost
    log.append_async = real  # type: ignore[method-assign]
    j.append("step-committed", step=2)
    # the start is in the log twice (the server took the first send), both before the commit
    assert kinds(log) == [("step-started", 1), ("step-committed", 1), ("step-started", 2), ("step-started", 2),
                          ("step-committed", 2)]
    commands = log.read_after(-1)
    assert commands is not None
    state = fold(commands)
    assert state.committed == 2 and state.conflicting_starts == 0


def test_sends_from_the_first_that_failed_on_are_appended_again_in_order(zk: KazooClient) -> None:
    log = CommandLog(zk, f"journal{uuid.uuid4().hex[:8]}")
    j = journal(log)
    j.append_ahead("step-started", step=1, offsets={"events.0": [0, 5]})
    real = log.append_async
    log.append_async = lambda kind, **body: Lost()  # type: ignore[method-assign,assignment]  # never sent
    j.append_ahead("step-committed", step=1)
    j.append_ahead("step-started", step=2, offsets={"events.0": [5, 9]})
    log.append_async = real  # type: ignore[method-assign]
    assert kinds(log) == [("step-started", 1)]  # the lost ones are not there yet
    j.settle()
    assert kinds(log) == [("step-started", 1), ("step-committed", 1), ("step-started", 2)]

    def refuse(kind: str, **body: Any) -> Any:
        raise ConnectionLoss()
    log.append_async = refuse  # type: ignore[method-assign]
    j.append_ahead("step-committed", step=2)   # could not be queued
    log.append_async = real  # type: ignore[method-assign]
    j.append_ahead("step-started", step=3, offsets={"events.0": [9, 12]})  # queued behind it, not sent
    j.append("step-committed", step=3)
    assert kinds(log)[3:] == [("step-committed", 2), ("step-started", 3), ("step-committed", 3)]
    state = log.load()
    assert state.committed == 3 and state.duplicate_commits == 0


def test_a_coordinator_whose_log_another_claimed_is_refused_and_the_log_keeps_only_the_new_ones_commands(
        zookeeper: str, zk: KazooClient) -> None:
    """Two coordinators alive for one pipeline (an operator that lost its lease and still runs): the one
    that claimed the log first is deposed by the second's claim; none of its decisions, waiting or sent
    ahead, reaches the log, and the log is what the new one wrote."""
    from ftpipeline.coordinator.errors import Superseded

    name = f"journal{uuid.uuid4().hex[:8]}"
    other = KazooClient(hosts=zookeeper, timeout=10.0)
    other.start(timeout=10)
    try:
        old_log, new_log = CommandLog(zk, name), CommandLog(other, name)
        old, new = journal(old_log), journal(new_log)
        old_log.claim(old.owner)
        old.append("step-started", step=1, offsets={"events.0": [0, 5]})
        old.append_ahead("step-committed", step=1)
        old.settle()
        new_log.claim(new.owner)
        assert new_log.owner() == new.owner
        new.append("step-started", step=2, offsets={"events.0": [5, 9]})
        before = log_of(new_log)

        old.append_ahead("step-started", step=2, offsets={"events.0": [5, 7]})  # a different decision
        with pytest.raises(Superseded, match="claimed by"):
            old.settle()
        with pytest.raises(Superseded):
            old.append("suspended", reason="a deposed coordinator's decision")
        with pytest.raises(Deposed):  # nor through the log itself
            old_log.append("step-committed", step=2)
        assert log_of(new_log) == before
        assert new_log.load().started[2] == {"events.0": (5, 9)}
        new.append("step-committed", step=2)  # the new one goes on
        assert new_log.load().committed == 2
    finally:
        other.stop()
        other.close()


def log_of(log: CommandLog) -> list[tuple[str, dict[str, Any]]]:
    commands = log.read_after(-1)
    assert commands is not None
    return [(c.kind, c.body) for c in commands]
