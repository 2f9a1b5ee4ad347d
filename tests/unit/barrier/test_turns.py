"""A sink channel's release turns (barrier/turns.py): one holder at a time, a stuck one abandoned."""

from __future__ import annotations

import threading
import time

import pytest

from ftpipeline.barrier.turns import Busy, Turns


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_free_channel_is_taken_at_once_and_given_back() -> None:
    turns = Turns(wait_s=0.0, stuck_s=60.0, clock=Clock())
    first = turns.take(0)
    assert first.took_over is None and not first.void
    turns.take(1)  # another channel: its own turn
    turns.give_back(first)
    assert turns.take(0).took_over is None


def test_a_held_turn_refuses_a_second_release_until_it_is_stuck() -> None:
    clock = Clock()
    turns = Turns(wait_s=0.0, stuck_s=60.0, clock=clock)
    stuck = turns.take(0)
    clock.now += 59
    with pytest.raises(Busy, match="channel 0: a release has held it for 59s"):
        turns.take(0)
    clock.now += 1
    taken = turns.take(0)
    assert taken.took_over is stuck and stuck.void and not taken.void
    turns.give_back(stuck)  # the stuck holder waking up: the new turn stays held
    clock.now += 1
    with pytest.raises(Busy):
        turns.take(0)
    turns.give_back(taken)
    assert turns.take(0).took_over is None


def test_a_release_waits_for_a_turn_given_back_within_its_wait() -> None:
    turns = Turns(wait_s=5.0, stuck_s=60.0)
    held = turns.take(0)
    threading.Timer(0.2, turns.give_back, [held]).start()
    started = time.monotonic()
    taken = turns.take(0)
    assert taken.took_over is None and not held.void
    assert 0.1 < time.monotonic() - started < 4.0


def test_a_release_waiting_for_a_turn_takes_it_when_the_holder_turns_stuck() -> None:
    turns = Turns(wait_s=5.0, stuck_s=0.3)
    held = turns.take(0)
    taken = turns.take(0)  # waits until the holder has had it for stuck_s, not for wait_s
    assert taken.took_over is held and held.void
    assert taken.since - held.since < 4.0
