"""VectorClock: tick, merge, epochs, the happened-before order and the wire encoding."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ftpipeline.checkpoint.clock import VectorClock

WORKERS = ("w0", "w1", "w2", "w3")

clocks = st.builds(
    VectorClock,
    st.dictionaries(st.sampled_from(WORKERS), st.integers(min_value=1, max_value=20), max_size=len(WORKERS)),
    st.integers(min_value=0, max_value=5),
)


# --- tick ------------------------------------------------------------------------------------

def test_tick_increments_only_the_own_component_and_keeps_the_epoch() -> None:
    c = VectorClock({"w0": 2, "w1": 5}, epoch=3)
    t = c.tick("w0")
    assert t.counts == {"w0": 3, "w1": 5}
    assert t.epoch == 3
    assert c.counts == {"w0": 2, "w1": 5}  # the original is not modified


def test_tick_of_an_unknown_worker_starts_at_one() -> None:
    assert VectorClock().tick("w9").counts == {"w9": 1}


# --- merge -----------------------------------------------------------------------------------

def test_merge_is_the_component_wise_max_with_the_max_epoch() -> None:
    a = VectorClock({"w0": 4, "w1": 1}, epoch=1)
    b = VectorClock({"w1": 3, "w2": 2}, epoch=2)
    m = a.merge(b)
    assert m.counts == {"w0": 4, "w1": 3, "w2": 2}
    assert m.epoch == 2
    assert a.merge(VectorClock(epoch=0)).epoch == 1


# --- with_epoch ------------------------------------------------------------------------------

def test_with_epoch_raises_the_epoch_and_keeps_counts() -> None:
    c = VectorClock({"w0": 2}, epoch=1)
    assert c.with_epoch(4) == VectorClock({"w0": 2}, 4)


def test_with_epoch_never_lowers() -> None:
    c = VectorClock({"w0": 2}, epoch=5)
    assert c.with_epoch(3).epoch == 5
    assert c.with_epoch(5).epoch == 5


# --- order -----------------------------------------------------------------------------------

def test_le_is_component_wise_with_missing_components_as_zero() -> None:
    small = VectorClock({"w0": 1}, 0)
    big = VectorClock({"w0": 2, "w1": 1}, 0)
    assert small <= big
    assert not big <= small
    assert VectorClock() <= small
    assert small <= small


def test_le_includes_the_epoch() -> None:
    early = VectorClock({"w0": 1}, epoch=0)
    later = VectorClock({"w0": 1}, epoch=1)
    assert early <= later
    assert not later <= early
    assert early < later


def test_lt_is_strict() -> None:
    a = VectorClock({"w0": 1}, 1)
    assert not a < VectorClock({"w0": 1}, 1)
    assert a < VectorClock({"w0": 2}, 1)
    assert not VectorClock({"w0": 2}, 1) < a


def test_concurrent_clocks() -> None:
    a = VectorClock({"w0": 2, "w1": 1})
    b = VectorClock({"w0": 1, "w1": 2})
    assert a.concurrent(b) and b.concurrent(a)
    # the epoch alone can make otherwise ordered counts concurrent
    assert VectorClock({"w0": 2}, 0).concurrent(VectorClock({"w0": 1}, 1))
    assert not a.concurrent(a.tick("w0"))
    assert not a.concurrent(a)


def test_lt_is_asymmetric_with_explicit_zero_components() -> None:
    with_zero = VectorClock({"w0": 0}, 0)
    empty = VectorClock({}, 0)
    assert not (with_zero < empty and empty < with_zero)


# --- encoding --------------------------------------------------------------------------------

def test_encode_is_compact_sorted_json() -> None:
    text = VectorClock({"w1": 2, "w0": 7}, epoch=3).encode()
    assert text == '{"e":3,"c":{"w0":7,"w1":2}}'
    assert json.loads(text) == {"e": 3, "c": {"w0": 7, "w1": 2}}


@pytest.mark.parametrize("empty", [None, "", b""])
def test_decode_of_nothing_is_the_zero_clock(empty: str | bytes | None) -> None:
    assert VectorClock.decode(empty) == VectorClock()
    assert VectorClock.decode(empty).epoch == 0


def test_decode_accepts_bytes() -> None:
    c = VectorClock({"w0": 1}, 2)
    assert VectorClock.decode(c.encode().encode()) == c


@given(clocks)
def test_encode_decode_round_trip(c: VectorClock) -> None:
    assert VectorClock.decode(c.encode()) == c


# --- properties ------------------------------------------------------------------------------

@given(clocks, clocks)
def test_merge_is_commutative(a: VectorClock, b: VectorClock) -> None:
    assert a.merge(b) == b.merge(a)


@given(clocks, clocks, clocks)
def test_merge_is_associative(a: VectorClock, b: VectorClock, c: VectorClock) -> None:
    assert a.merge(b).merge(c) == a.merge(b.merge(c))


@given(clocks)
def test_merge_is_idempotent(a: VectorClock) -> None:
    assert a.merge(a) == a


@given(clocks, clocks)
def test_merge_is_an_upper_bound(a: VectorClock, b: VectorClock) -> None:
    m = a.merge(b)
    assert a <= m and b <= m


@given(clocks, clocks)
def test_merge_with_a_later_clock_is_that_clock(a: VectorClock, b: VectorClock) -> None:
    assert (a <= b) == (a.merge(b) == b)


@given(clocks, st.sampled_from(WORKERS))
def test_tick_strictly_increases(a: VectorClock, worker: str) -> None:
    t = a.tick(worker)
    assert a < t
    assert not t <= a
