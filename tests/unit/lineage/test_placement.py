"""Channel placement: initial co-location, adoption after a loss, hand-back to a newcomer."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ftpipeline.lineage.naming import Channel, WorkerId
from ftpipeline.lineage.placement import adopt, hand_back, initial_placement

W0, W1, W2, W3 = (WorkerId(f"w{i}") for i in range(4))
STAGES = ("events", "clean", "agg", "out")
STATEFUL = {"agg"}


def is_stateful(stage: str) -> bool:
    return stage in STATEFUL


def channels(parallelism: int = 4, stages: tuple[str, ...] = STAGES) -> list[Channel]:
    return [Channel(s, i) for s in stages for i in range(parallelism)]


def loads(placement: dict[Channel, WorkerId]) -> Counter[WorkerId]:
    return Counter(placement.values())


# -- start -----------------------------------------------------------------------


def test_initial_placement_is_index_mod_workers() -> None:
    placement = initial_placement(channels(5), [W0, W1, W2])
    assert set(placement) == set(channels(5))
    for ch, worker in placement.items():
        assert worker == [W0, W1, W2][ch.index % 3]


def test_initial_placement_co_locates_forward_channels() -> None:
    placement = initial_placement(channels(4), [W0, W1])
    for i in range(4):
        assert len({placement[Channel(s, i)] for s in STAGES}) == 1


def test_initial_placement_needs_workers() -> None:
    with pytest.raises(ValueError):
        initial_placement(channels(2), [])


# -- adoption ----------------------------------------------------------------------


def test_adopt_moves_only_the_dead_workers_channels() -> None:
    before = initial_placement(channels(6), [W0, W1, W2])
    after, moves = adopt(before, W1, [W0, W2], is_stateful)
    orphans = {ch for ch, w in before.items() if w == W1}
    assert set(moves) == orphans
    assert W1 not in after.values()
    for ch, w in before.items():
        if w != W1:
            assert after[ch] == w
    for ch, w in moves.items():
        assert after[ch] == w and w in (W0, W2)


def test_adopt_spreads_over_survivors_evenly() -> None:
    before = initial_placement(channels(6), [W0, W1, W2])  # 8 channels each
    after, _ = adopt(before, W1, [W0, W2], is_stateful)
    assert loads(after) == {W0: 12, W2: 12}


def test_adopt_places_stateful_channels_first_on_the_least_loaded() -> None:
    before = {
        Channel("clean", 0): W0,
        Channel("clean", 1): W0,
        Channel("clean", 2): W1,
        Channel("clean", 3): W2,
        Channel("totals", 0): W2,
        Channel("totals", 1): W2,
    }
    after, moves = adopt(before, W2, [W0, W1], lambda stage: stage == "totals")
    # Stateful first (though 'clean' sorts before 'totals'), each to the least loaded, ties by name:
    # loads w0=2, w1=1 -> totals.0 to w1 (2, 2) -> totals.1 to w0 (3, 2) -> clean.3 to w1 (3, 3).
    assert moves == {Channel("totals", 0): W1, Channel("totals", 1): W0, Channel("clean", 3): W1}
    assert loads(after) == {W0: 3, W1: 3}


def test_adopt_is_deterministic() -> None:
    before = initial_placement(channels(7), [W0, W1, W2, W3])
    first = adopt(before, W2, [W3, W0, W1], is_stateful)
    again = adopt(dict(reversed(list(before.items()))), W2, [W1, W0, W3], is_stateful)
    assert first == again


def test_adopt_with_no_survivors_raises() -> None:
    before = initial_placement(channels(2), [W0])
    with pytest.raises(ValueError, match="no worker survives"):
        adopt(before, W0, [], is_stateful)


def test_adopt_does_not_change_its_input() -> None:
    before = initial_placement(channels(2), [W0, W1])
    snapshot = dict(before)
    adopt(before, W1, [W0], is_stateful)
    assert before == snapshot


# -- hand-back ----------------------------------------------------------------------


def test_hand_back_balances_to_within_one() -> None:
    before = {ch: W0 for ch in channels(3, ("events", "clean"))} | {Channel("out", i): W1 for i in range(3)}
    after, moves = hand_back(before, W2, [W0, W1], is_stateful)
    assert set(moves.values()) == {W2}
    assert max(loads(after).values()) - min(loads(after).values()) <= 1
    assert sum(loads(after).values()) == len(before)


def test_hand_back_moves_only_to_the_newcomer_and_only_moved_channels_change() -> None:
    before = initial_placement(channels(6), [W0, W1])
    after, moves = hand_back(before, W2, [W0, W1], is_stateful)
    assert moves
    for ch in before:
        if ch in moves:
            assert after[ch] == W2 != before[ch]
        else:
            assert after[ch] == before[ch]


def test_hand_back_never_moves_stateful_channels() -> None:
    before = {Channel("agg", i): W0 for i in range(6)} | {Channel("clean", 0): W0}
    after, moves = hand_back(before, W1, [W0], is_stateful)
    assert moves == {Channel("clean", 0): W1}
    assert all(after[Channel("agg", i)] == W0 for i in range(6))


def test_hand_back_skips_a_donor_with_only_stateful_channels() -> None:
    before = {Channel("agg", i): W0 for i in range(4)} | {Channel("clean", i): W1 for i in range(4)}
    after, moves = hand_back(before, W2, [W0, W1], is_stateful)
    assert all(w == W2 for w in moves.values())
    assert all(ch.stage == "clean" for ch in moves)
    assert loads(after) == {W0: 4, W1: 2, W2: 2}


def test_hand_back_when_already_balanced_moves_nothing() -> None:
    before = {Channel("clean", 0): W0}
    after, moves = hand_back(before, W1, [W0], is_stateful)
    assert moves == {}
    assert after == before


def test_hand_back_is_deterministic() -> None:
    before = initial_placement(channels(5), [W0, W1])
    assert hand_back(before, W2, [W0, W1], is_stateful) == hand_back(before, W2, [W1, W0], is_stateful)


@given(
    st.dictionaries(
        st.builds(Channel, st.sampled_from(STAGES), st.integers(0, 7)),
        st.sampled_from([W0, W1, W2]),
        max_size=32,
    )
)
def test_hand_back_properties(before: dict[Channel, WorkerId]) -> None:
    after, moves = hand_back(before, W3, [W0, W1, W2], is_stateful)
    assert set(after) == set(before)
    assert all(not is_stateful(ch.stage) for ch in moves)
    assert all(after[ch] == W3 for ch in moves)
    assert all(after[ch] == before[ch] for ch in before if ch not in moves)
    final = loads(after)
    # Every worker that still has a movable channel is within one of the newcomer.
    for worker in (W0, W1, W2):
        if any(w == worker and not is_stateful(ch.stage) for ch, w in after.items()):
            assert final[worker] - final[W3] <= 1
    # ... and the newcomer never ends up more loaded than a worker it took from.
    for worker in set(before[ch] for ch in moves):
        assert final[W3] <= final[worker] + 1
