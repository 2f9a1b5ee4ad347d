"""EpochKeeper: a worker's checkpoint triggers, deficits and in-flight inputs, alone and in a two-worker run."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ftpipeline.checkpoint.clock import VectorClock
from ftpipeline.worker.epochs import Consumption, EpochKeeper


def msg(epoch: int, **counts: int) -> VectorClock:
    return VectorClock(counts, epoch)


# --- consume ---------------------------------------------------------------------------------

def test_inputs_of_the_same_epoch_are_counted_without_checkpoint() -> None:
    k = EpochKeeper("w1")
    c = k.consume([msg(0, w0=1), msg(0, w0=2)])
    assert c == Consumption(checkpoint=None, deficit=0, inflight=())
    assert k.counts == {0: [0, 2]}
    assert k.clock.epoch == 0


def test_consume_merges_the_input_clocks() -> None:
    k = EpochKeeper("w1")
    k.consume([msg(0, w0=3), msg(0, w2=1)])
    assert k.clock.counts == {"w0": 3, "w2": 1}


def test_first_input_of_a_newer_epoch_triggers_the_checkpoint() -> None:
    k = EpochKeeper("w1")
    k.produce(5)                            # sent 5 of epoch 0
    k.consume([msg(0, w0=1)])
    k.consume([msg(0, w0=2)])               # received 2 of epoch 0
    c = k.consume([msg(1, w0=3)])
    assert c.checkpoint == 1
    assert c.deficit == 3                   # 5 sent - 2 received, before this input
    assert c.inflight == ()
    assert k.clock.epoch == 1
    assert k.counts == {0: [5, 2], 1: [0, 1]}


def test_checkpoint_can_jump_several_epochs_and_counts_all_older_ones() -> None:
    k = EpochKeeper("w1")
    k.produce(4)
    k.consume([msg(1)])                     # checkpoint 1, then epoch-1 work
    k.produce(2)
    c = k.consume([msg(3)])
    assert c.checkpoint == 3
    assert c.deficit == 4 + (2 - 1)         # epochs 0 and 1: both older than 3
    assert k.clock.epoch == 3


def test_older_inputs_after_the_checkpoint_are_inflight_and_counted() -> None:
    k = EpochKeeper("w1")
    k.consume([msg(1)])
    c = k.consume([msg(0), msg(1), msg(0)])
    assert c.checkpoint is None
    assert c.deficit == 0
    assert c.inflight == (0, 2)
    assert k.counts[0] == [0, 2]
    assert k.counts[1] == [0, 2]


def test_older_input_in_the_triggering_task_is_inflight_and_not_in_the_deficit() -> None:
    k = EpochKeeper("w1")
    k.consume([msg(0)])
    c = k.consume([msg(0), msg(1)])
    assert c.checkpoint == 1
    assert c.deficit == -1                  # only the input received before the checkpoint
    assert c.inflight == (0,)
    assert k.counts[0] == [0, 2]


def test_source_epoch_triggers_a_checkpoint_without_being_received() -> None:
    k = EpochKeeper("w0")
    k.produce(3)
    c = k.consume([], source_epoch=1)
    assert c == Consumption(checkpoint=1, deficit=3, inflight=())
    assert k.counts == {0: [3, 0]}
    assert k.clock.epoch == 1


def test_source_of_the_current_epoch_does_nothing() -> None:
    k = EpochKeeper("w0")
    k.consume([], source_epoch=1)
    c = k.consume([], source_epoch=1)
    assert c == Consumption(None, 0, ())
    assert k.counts == {}


# --- produce ---------------------------------------------------------------------------------

def test_produce_ticks_the_own_component_and_counts_sent() -> None:
    k = EpochKeeper("w0")
    first = k.produce(3)
    second = k.produce(2)
    assert first.counts == {"w0": 1}
    assert second.counts == {"w0": 2}
    assert first < second
    assert second == k.clock
    assert k.counts == {0: [5, 0]}


def test_produce_after_a_checkpoint_counts_in_the_new_epoch() -> None:
    k = EpochKeeper("w0")
    k.produce(1)
    k.consume([], source_epoch=2)
    stamp = k.produce(4)
    assert stamp.epoch == 2
    assert k.counts == {0: [1, 0], 2: [4, 0]}


# --- checkpoint_now, settle, reset -----------------------------------------------------------

def test_checkpoint_now_reports_the_deficit_once() -> None:
    k = EpochKeeper("w1")
    k.produce(2)
    k.consume([msg(0)])
    assert k.checkpoint_now(1) == 1
    assert k.clock.epoch == 1
    assert k.checkpoint_now(1) is None
    # a later input of that epoch is no new trigger
    assert k.consume([msg(1)]).checkpoint is None


def test_checkpoint_now_is_none_when_already_at_or_past_the_epoch() -> None:
    k = EpochKeeper("w1")
    k.consume([msg(2)])
    assert k.checkpoint_now(2) is None
    assert k.checkpoint_now(1) is None
    assert k.clock.epoch == 2


def test_checkpoint_now_with_nothing_sent_or_received_reports_zero() -> None:
    assert EpochKeeper("w1").checkpoint_now(1) == 0


def test_settle_drops_counts_of_older_epochs_only() -> None:
    k = EpochKeeper("w1")
    k.produce(1)
    k.consume([msg(1)])
    k.produce(1)
    k.consume([msg(2)])
    assert set(k.counts) == {0, 1, 2}
    k.settle(2)
    assert k.counts == {2: [0, 1]}
    assert k.checkpoint_now(3) == -1        # the settled epochs no longer count


def test_reset_clears_clock_and_counts() -> None:
    k = EpochKeeper("w1")
    k.produce(3)
    k.consume([msg(1, w0=4)])
    k.reset(5)
    assert k.clock == VectorClock(epoch=5)
    assert k.counts == {}
    assert k.consume([msg(4)]).checkpoint is None


# --- two workers -----------------------------------------------------------------------------

def run_two_workers(before: int, after: int, order: list[int], announce_at: int) -> tuple[int, int, int]:
    """A sends ``before`` epoch-0 and ``after`` epoch-1 messages to B, delivered in ``order``.

    The coordinator starts epoch 1 with a source task to A (A checkpoints) and
    announces it to B after ``announce_at`` deliveries (B checkpoints then, unless
    an epoch-1 message from A got there first). Returns (deficit A, deficit B, in-flight at B).
    """
    a, b = EpochKeeper("A"), EpochKeeper("B")
    messages: list[VectorClock] = []
    for _ in range(before):
        a.consume([], source_epoch=0)
        messages.append(a.produce(1))
    ca = a.consume([], source_epoch=1)
    assert ca.checkpoint == 1
    for _ in range(after):
        messages.append(a.produce(1))
    assert [m.epoch for m in messages] == [0] * before + [1] * after

    deficit_b: int | None = None
    inflight_b = 0
    for position, i in enumerate(order):
        if position == announce_at:
            now = b.checkpoint_now(1)
            if now is not None:
                assert deficit_b is None
                deficit_b = now
        c = b.consume([messages[i]])
        if c.checkpoint is not None:
            assert c.checkpoint == 1 and deficit_b is None  # one checkpoint per epoch
            deficit_b = c.deficit
        if c.inflight:                      # only older messages cross the cut
            assert c.inflight == (0,) and messages[i].epoch == 0
        inflight_b += len(c.inflight)
    if deficit_b is None:                   # announced after the last delivery
        deficit_b = b.checkpoint_now(1)
    assert deficit_b is not None
    return ca.deficit, deficit_b, inflight_b


@st.composite
def deliveries(draw: st.DrawFn) -> tuple[int, int, list[int], int]:
    before = draw(st.integers(min_value=0, max_value=8))
    after = draw(st.integers(min_value=0, max_value=4))
    order = draw(st.permutations(range(before + after)))
    announce_at = draw(st.integers(min_value=0, max_value=before + after))
    return before, after, list(order), announce_at


@given(deliveries())
def test_two_workers_deficits_minus_inflight_settle_to_zero(case: tuple[int, int, list[int], int]) -> None:
    before, after, order, announce_at = case
    deficit_a, deficit_b, inflight_b = run_two_workers(before, after, order, announce_at)
    assert deficit_a == before
    assert deficit_a + deficit_b - inflight_b == 0


def test_two_workers_concrete_order() -> None:
    # epoch-0 messages 0,1 arrive, then A's first epoch-1 message (B checkpoints), then 2,3 cross the cut
    deficit_a, deficit_b, inflight_b = run_two_workers(4, 1, [0, 1, 4, 2, 3], announce_at=5)
    assert (deficit_a, deficit_b, inflight_b) == (4, -2, 2)
