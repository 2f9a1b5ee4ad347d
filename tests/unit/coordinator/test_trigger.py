"""StepTrigger: when the next step starts, driven by an explicit clock (seconds)."""

from __future__ import annotations

from ftpipeline.coordinator.trigger import Reason, StepTrigger

# Times are binary fractions (0.25, 0.5, ...) so "now - then" is exact in floating point.


def started(now: float = 0.0, **kwargs: int) -> StepTrigger:
    trigger = StepTrigger(**kwargs)
    trigger.start(now)
    return trigger


def test_nothing_due_by_default() -> None:
    trigger = started()
    assert trigger.due(0.0) is None
    assert trigger.due(3600.0) is None


def test_records_threshold() -> None:
    trigger = started(records=10, timer_ms=1000)
    trigger.received(9, 0.0)
    assert trigger.due(0.0) is None
    trigger.received(10, 0.0)
    assert trigger.due(0.0) is Reason.RECORDS


def test_received_replaces_the_count() -> None:
    trigger = started(records=10, timer_ms=1000)
    trigger.received(6, 0.0)
    trigger.received(6, 0.0)  # a new total, not 6 more
    assert trigger.due(0.0) is None


def test_default_trigger_fires_on_the_first_record() -> None:
    trigger = started()
    trigger.received(1, 0.0)
    assert trigger.due(0.0) is Reason.RECORDS


def test_timer_after_first_record() -> None:
    trigger = started(records=100, timer_ms=250)
    trigger.received(1, 1.0)
    assert trigger.due(1.125) is None
    trigger.received(5, 1.125)  # more records do not restart the timer
    assert trigger.due(1.25) is Reason.TIMER


def test_timer_restarts_after_a_step() -> None:
    trigger = started(records=100, timer_ms=250)
    trigger.received(1, 0.0)
    assert trigger.due(0.25) is Reason.TIMER
    trigger.stepped(0.25)
    assert trigger.due(10.0) is None  # no records since the step: no timer
    trigger.received(1, 2.0)
    assert trigger.due(2.125) is None  # measured from the new first record, not the old one
    assert trigger.due(2.25) is Reason.TIMER


def test_received_zero_clears_the_first_record_time() -> None:
    trigger = started(records=100, timer_ms=250)
    trigger.received(1, 0.0)
    trigger.received(0, 0.125)
    assert trigger.due(1.0) is None
    trigger.received(1, 2.0)
    assert trigger.due(2.125) is None
    assert trigger.due(2.25) is Reason.TIMER


def test_tick_with_zero_records() -> None:
    trigger = started(tick_ms=500)
    assert trigger.due(0.25) is None
    assert trigger.due(0.5) is Reason.TICK
    trigger.stepped(0.5)
    assert trigger.due(0.75) is None  # measured from the previous step
    assert trigger.due(1.0) is Reason.TICK


def test_tick_measured_from_start() -> None:
    trigger = started(now=100.0, tick_ms=500)
    assert trigger.due(100.25) is None
    assert trigger.due(100.5) is Reason.TICK


def test_checkpoint_interval() -> None:
    trigger = started(checkpoint_ms=1000)
    assert trigger.due(0.5) is None
    assert trigger.due(1.0) is Reason.CHECKPOINT
    trigger.checkpointed(1.0)
    assert trigger.due(1.5) is None
    assert trigger.due(2.0) is Reason.CHECKPOINT


def test_a_step_does_not_reset_the_checkpoint_interval() -> None:
    trigger = started(checkpoint_ms=1000)
    trigger.stepped(0.75)
    assert trigger.due(1.0) is Reason.CHECKPOINT


def test_replay_takes_precedence() -> None:
    trigger = started(records=1, timer_ms=0, tick_ms=1, checkpoint_ms=1)
    trigger.received(5, 0.0)
    trigger.replay(True)
    assert trigger.due(10.0) is Reason.REPLAY
    trigger.replay(False)
    assert trigger.due(10.0) is Reason.RECORDS


def test_replay_alone_is_due() -> None:
    trigger = started()
    trigger.replay(True)
    assert trigger.due(0.0) is Reason.REPLAY


def test_stepped_clears_replay_and_records() -> None:
    trigger = started(records=5)
    trigger.received(5, 0.0)
    trigger.replay(True)
    trigger.stepped(0.0)
    assert trigger.due(0.0) is None


def test_reasons_checked_in_documented_order() -> None:
    trigger = started(records=10, timer_ms=250, tick_ms=250, checkpoint_ms=250)
    trigger.received(1, 0.0)
    assert trigger.due(1.0) is Reason.TIMER  # timer, tick and checkpoint all due: timer first
    trigger.received(0, 1.0)
    assert trigger.due(1.0) is Reason.TICK  # tick before checkpoint
    trigger.stepped(1.0)
    assert trigger.due(1.0) is Reason.CHECKPOINT
