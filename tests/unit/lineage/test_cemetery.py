"""IntervalSet: the cemetery's consumed sequence numbers as sorted, disjoint, non-adjacent intervals."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ftpipeline.lineage.cemetery import IntervalSet


def assert_canonical(s: IntervalSet) -> None:
    """Sorted, disjoint, non-adjacent, lo <= hi."""
    intervals = s.intervals()
    for lo, hi in intervals:
        assert lo <= hi
    for (_, hi), (lo, _) in zip(intervals, intervals[1:]):
        assert lo > hi + 1, intervals


def test_empty() -> None:
    s = IntervalSet()
    assert len(s) == 0
    assert list(s) == []
    assert s.intervals() == []
    assert 0 not in s
    assert s.encode() == "[]"


def test_add_and_contains() -> None:
    s = IntervalSet()
    s.add(5)
    assert 5 in s
    assert 4 not in s and 6 not in s
    assert s.intervals() == [(5, 5)]


def test_add_is_idempotent() -> None:
    s = IntervalSet([3, 3, 3])
    assert s.intervals() == [(3, 3)]
    assert len(s) == 1


def test_contains_ignores_non_integers() -> None:
    s = IntervalSet([1, 2, 3])
    assert "2" not in s
    assert None not in s
    assert 2.0 not in s


def test_adjacent_values_merge() -> None:
    s = IntervalSet([1, 3])
    assert s.intervals() == [(1, 1), (3, 3)]
    s.add(2)
    assert s.intervals() == [(1, 3)]


def test_add_extends_an_interval_on_either_side() -> None:
    s = IntervalSet([5, 6])
    s.add(7)
    s.add(4)
    assert s.intervals() == [(4, 7)]


def test_add_bridging_two_intervals() -> None:
    s = IntervalSet([1, 2, 4, 5, 9])
    assert s.intervals() == [(1, 2), (4, 5), (9, 9)]
    s.add(3)
    assert s.intervals() == [(1, 5), (9, 9)]


def test_add_out_of_order() -> None:
    s = IntervalSet([10, 1, 5, 2, 3, 4])
    assert s.intervals() == [(1, 5), (10, 10)]
    assert list(s) == [1, 2, 3, 4, 5, 10]
    assert len(s) == 6


def test_discard_splits_an_interval() -> None:
    s = IntervalSet(range(1, 11))
    s.discard(5)
    assert s.intervals() == [(1, 4), (6, 10)]
    assert 5 not in s and 4 in s and 6 in s


def test_discard_at_the_ends_shrinks() -> None:
    s = IntervalSet(range(1, 6))
    s.discard(1)
    s.discard(5)
    assert s.intervals() == [(2, 4)]


def test_discard_a_single_value_interval_removes_it() -> None:
    s = IntervalSet([1, 2, 7])
    s.discard(7)
    assert s.intervals() == [(1, 2)]


def test_discard_absent_value_is_a_no_op() -> None:
    s = IntervalSet([1, 2, 3, 8])
    s.discard(5)
    s.discard(0)
    assert s.intervals() == [(1, 3), (8, 8)]


def test_resurrect_and_re_add() -> None:
    """Recovery resurrects a consumed step, which is then consumed again."""
    s = IntervalSet(range(1, 101))
    s.discard(50)
    assert len(s.intervals()) == 2
    s.add(50)
    assert s.intervals() == [(1, 100)]


def test_equality() -> None:
    assert IntervalSet([1, 2, 3]) == IntervalSet([3, 2, 1])
    assert IntervalSet([1, 2, 3]) != IntervalSet([1, 3])
    assert IntervalSet() != []


def test_in_order_adds_keep_one_interval() -> None:
    s = IntervalSet()
    for step in range(1, 10_001):
        s.add(step)
    assert s.intervals() == [(1, 10_000)]
    assert len(s.encode()) == len("[1,10000]")


# -- stored form ----------------------------------------------------------------


def test_encode_is_a_flat_json_array() -> None:
    s = IntervalSet([1, 2, 3, 7, 9, 10])
    assert s.encode() == "[1,3,7,7,9,10]"
    assert json.loads(s.encode()) == [1, 3, 7, 7, 9, 10]


def test_encode_decode_round_trip() -> None:
    s = IntervalSet([0, 1, 2, 5, 9, 10, 11, 40])
    back = IntervalSet.decode(s.encode())
    assert back == s
    assert back.intervals() == s.intervals()


def test_decode_accepts_bytes() -> None:
    assert IntervalSet.decode(b"[1,3]") == IntervalSet([1, 2, 3])


@pytest.mark.parametrize("empty", [None, "", b"", "[]"])
def test_decode_empty(empty) -> None:
    assert IntervalSet.decode(empty) == IntervalSet()


@pytest.mark.parametrize("text", ["[1]", "[1,2,3]", "{}", '{"lo": 1}', "7", "null", '"1,2"', "[[1,2]]", '["a","b"]', "not json"])
def test_decode_rejects_malformed_input(text: str) -> None:
    with pytest.raises(ValueError):
        IntervalSet.decode(text)


@pytest.mark.parametrize("text", ["[5,1]", "[1,3,2,4]", "[7,9,1,2]"], ids=["descending", "overlapping", "unsorted"])
def test_decode_rejects_bounds_that_break_the_invariant(text: str) -> None:
    with pytest.raises(ValueError):
        IntervalSet.decode(text)


# -- against a plain set ----------------------------------------------------------

ops = st.lists(st.tuples(st.sampled_from(["add", "discard"]), st.integers(0, 60)), max_size=120)


@given(ops)
def test_behaves_like_a_python_set(operations: list[tuple[str, int]]) -> None:
    s, model = IntervalSet(), set()
    for op, value in operations:
        getattr(s, op)(value)
        getattr(model, op)(value)
        assert_canonical(s)
    assert list(s) == sorted(model)
    assert len(s) == len(model)
    for value in range(-1, 63):
        assert (value in s) == (value in model)
    assert IntervalSet.decode(s.encode()) == s
    assert IntervalSet(model) == s  # one canonical form per set
