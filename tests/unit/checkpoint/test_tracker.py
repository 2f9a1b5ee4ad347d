"""CheckpointTracker: when a checkpoint epoch is complete, its legal transitions, and its manifest."""

from __future__ import annotations

import functools
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ftpipeline.checkpoint.tracker import ChannelSnapshot, CheckpointState, CheckpointTracker

S = CheckpointState
WORKERS = frozenset({"w0", "w1", "w2"})


def state(t: CheckpointTracker) -> CheckpointState:
    return t.state


def tracker(boundary: int = 5, workers: frozenset[str] = WORKERS) -> CheckpointTracker:
    return CheckpointTracker(epoch=2, boundary=boundary, workers=workers, started_at=0.0)


def snap(channel: str, step: int = 5) -> ChannelSnapshot:
    return ChannelSnapshot(channel, step, f"epoch-2/state/{channel}.parquet", rows=3, bytes=100)


def complete() -> CheckpointTracker:
    t = tracker()
    for w in sorted(WORKERS):
        t.worker_checkpointed(w, 0, [])
    t.boundary_released(5)
    assert state(t) is S.COMPLETE
    return t


# --- completion ------------------------------------------------------------------------------

def test_completes_when_all_reported_deficit_settled_and_boundary_released() -> None:
    t = tracker()
    t.worker_checkpointed("w0", 2, [snap("agg.0")])
    t.worker_checkpointed("w1", -1, [snap("agg.1")])
    t.boundary_released(5)
    assert state(t) is S.COLLECTING          # w2 has not reported
    t.worker_checkpointed("w2", 0, [])
    assert state(t) is S.COLLECTING          # deficit 1: one message still travelling
    assert t.deficit == 1
    t.received_inflight({"clean.0.5.agg.1.1": 7})
    assert t.deficit == 0
    assert state(t) is S.COMPLETE
    assert t.reason == ""


def test_waits_for_the_boundary_release() -> None:
    t = tracker(boundary=5)
    for w in sorted(WORKERS):
        t.worker_checkpointed(w, 0, [])
    assert state(t) is S.COLLECTING
    t.boundary_released(4)
    assert state(t) is S.COLLECTING
    t.boundary_released(6)                  # releasing past the boundary also covers it
    assert state(t) is S.COMPLETE


def test_released_never_goes_back() -> None:
    t = tracker(boundary=5)
    t.boundary_released(5)
    t.boundary_released(3)
    assert t.released == 5
    for w in sorted(WORKERS):
        t.worker_checkpointed(w, 0, [])
    assert state(t) is S.COMPLETE


def test_a_nonzero_total_deficit_blocks_completion() -> None:
    t = tracker()
    t.boundary_released(5)
    t.worker_checkpointed("w0", 1, [])
    t.worker_checkpointed("w1", 0, [])
    t.worker_checkpointed("w2", 0, [])
    assert state(t) is S.COLLECTING
    assert t.deficit == 1


def test_inflight_received_before_the_report_is_accounted() -> None:
    t = tracker()
    t.boundary_released(5)
    t.received_inflight({"a.0.5.b.0.0": 1, "a.0.5.b.0.1": 2})
    assert t.deficit == -2
    assert state(t) is S.COLLECTING
    t.worker_checkpointed("w0", 2, [])
    t.worker_checkpointed("w1", 0, [])
    assert state(t) is S.COLLECTING
    t.worker_checkpointed("w2", 0, [])
    assert state(t) is S.COMPLETE


def test_events_for_workers_outside_the_set_are_ignored() -> None:
    t = tracker(workers=frozenset({"w0"}))
    t.boundary_released(5)
    t.worker_checkpointed("ghost", 1, [snap("agg.9")])
    assert t.reported == {}
    assert t.snapshots == {}
    t.worker_checkpointed("w0", 0, [])
    assert state(t) is S.COMPLETE            # the ghost's deficit of 1 was not counted


def test_snapshots_are_kept_per_channel_latest_wins() -> None:
    t = tracker()
    t.worker_checkpointed("w0", 0, [snap("agg.0", 3)])
    t.worker_checkpointed("w0", 0, [snap("agg.0", 4)])
    assert t.snapshots == {"agg.0": snap("agg.0", 4)}


# Events of one checkpoint: three reports, three in-flight receipts, two releases.
DEFICITS = {"w0": 2, "w1": 3, "w2": -2}
INFLIGHT = ("x.0.5.y.0.0", "x.0.5.y.0.1", "x.1.5.y.0.0")


def _events() -> list[Callable[[CheckpointTracker], None]]:
    out: list[Callable[[CheckpointTracker], None]] = []
    for w, d in DEFICITS.items():
        out.append(functools.partial(_report, w, d))
    for name in INFLIGHT:
        out.append(functools.partial(_receive, name))
    out.append(functools.partial(CheckpointTracker.boundary_released, step=3))
    out.append(functools.partial(CheckpointTracker.boundary_released, step=5))
    return out


def _report(worker: str, deficit: int, t: CheckpointTracker) -> None:
    t.worker_checkpointed(worker, deficit, [snap(f"agg.{worker[1]}")])


def _receive(name: str, t: CheckpointTracker) -> None:
    t.received_inflight({name: 1})


EVENTS = _events()


@given(st.permutations(range(len(EVENTS))))
def test_completion_does_not_depend_on_the_order_of_events(order: list[int]) -> None:
    assert sum(DEFICITS.values()) == len(INFLIGHT)
    t = tracker(boundary=5)
    release_3 = len(EVENTS) - 2
    # complete exactly once every report, every receipt and the release of 5 happened
    completes_at = max(order.index(i) for i in range(len(EVENTS)) if i != release_3)
    for position, i in enumerate(order):
        EVENTS[i](t)
        expected = S.COMPLETE if position >= completes_at else S.COLLECTING
        assert state(t) is expected, (position, completes_at)
    assert t.deficit == 0
    assert t.released == 5
    assert set(t.snapshots) == {"agg.0", "agg.1", "agg.2"}
    assert set(t.inflight) == set(INFLIGHT)


# --- abort and illegal transitions -----------------------------------------------------------

def test_abort_from_collecting() -> None:
    t = tracker()
    t.abort("worker w1 lost")
    assert state(t) is S.ABORTED
    assert t.reason == "worker w1 lost"
    # events after the abort change nothing
    for w in sorted(WORKERS):
        t.worker_checkpointed(w, 0, [snap("agg.0")])
    t.received_inflight({"a.0.1.b.0.0": 1})
    t.boundary_released(5)
    assert state(t) is S.ABORTED
    assert t.reported == {} and t.snapshots == {} and t.inflight == {}


def test_abort_from_complete() -> None:
    t = complete()
    t.abort("commit failed: session expired")
    assert state(t) is S.ABORTED
    assert t.reason == "commit failed: session expired"


def test_commit_from_complete() -> None:
    t = complete()
    t.committed()
    assert state(t) is S.COMMITTED


def test_commit_from_collecting_is_illegal() -> None:
    t = tracker()
    with pytest.raises(RuntimeError, match="collecting -> committed is not allowed"):
        t.committed()
    assert state(t) is S.COLLECTING


def test_commit_from_aborted_is_illegal() -> None:
    t = tracker()
    t.abort("lost")
    with pytest.raises(RuntimeError, match="aborted -> committed"):
        t.committed()
    assert state(t) is S.ABORTED


def test_commit_twice_is_illegal() -> None:
    t = complete()
    t.committed()
    with pytest.raises(RuntimeError, match="committed -> committed"):
        t.committed()


def test_abort_after_commit_or_abort_changes_nothing() -> None:
    t = complete()
    t.committed()
    t.abort("too late")
    assert state(t) is S.COMMITTED
    assert t.reason == ""
    u = tracker()
    u.abort("first")
    u.abort("second")
    assert state(u) is S.ABORTED
    assert u.reason == "first"


@pytest.mark.parametrize("target", list(S))
@pytest.mark.parametrize("final", [S.ABORTED, S.COMMITTED])
def test_nothing_leaves_a_final_state(final: CheckpointState, target: CheckpointState) -> None:
    t = complete()
    if final is S.ABORTED:
        t.abort("x")
    else:
        t.committed()
    with pytest.raises(RuntimeError, match="is not allowed"):
        t._set_state(target)
    assert state(t) is final


@pytest.mark.parametrize("target", [S.COLLECTING, S.COMPLETE])
def test_complete_cannot_go_back_or_stay(target: CheckpointState) -> None:
    t = complete()
    with pytest.raises(RuntimeError, match="is not allowed"):
        t._set_state(target)


def test_collecting_cannot_skip_to_committed_or_stay() -> None:
    for target in (S.COLLECTING, S.COMMITTED):
        with pytest.raises(RuntimeError, match="is not allowed"):
            tracker()._set_state(target)


# --- manifest --------------------------------------------------------------------------------

def test_manifest_contents() -> None:
    t = tracker(boundary=5)
    t.worker_checkpointed("w1", 1, [snap("agg.1", 4)])
    t.worker_checkpointed("w0", 0, [snap("agg.0", 5), snap("agg2.0", 3)])
    t.received_inflight({"clean.1.5.agg.1.1": 9, "clean.0.5.agg.1.1": 4})
    m = t.manifest({"events.0": 600, "events.1": 650}, gt_last=6)
    assert m["epoch"] == 2
    assert m["boundary"] == 5
    assert m["offsets"] == {"events.0": 600, "events.1": 650}
    assert m["gt_last"] == 6
    assert list(m["states"]) == ["agg.0", "agg.1", "agg2.0"]
    assert m["states"]["agg.1"] == {
        "channel": "agg.1", "step": 4, "path": "epoch-2/state/agg.1.parquet", "rows": 3, "bytes": 100,
    }
    assert all(isinstance(v, dict) for v in m["states"].values())
    assert list(m["inflight"].items()) == [("clean.0.5.agg.1.1", 4), ("clean.1.5.agg.1.1", 9)]
    assert set(m) == {"epoch", "boundary", "offsets", "gt_last", "states", "inflight"}


def test_manifest_states_rebuild_the_snapshots() -> None:
    t = tracker()
    s = snap("agg.0", 4)
    t.worker_checkpointed("w0", 0, [s])
    m = t.manifest({}, gt_last=5)
    assert ChannelSnapshot(**m["states"]["agg.0"]) == s
