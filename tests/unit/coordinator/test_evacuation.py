"""The evacuation protocol's own state (coordinator/evacuation.py): pure logic, no workers."""

from __future__ import annotations

from ftpipeline.coordinator.evacuation import Evacuations, Stage, handover_manifest
from ftpipeline.lineage.naming import WorkerId

W0, W1, W2 = WorkerId("w0"), WorkerId("w1"), WorkerId("w2")
MEMBERS = [W0, W1, W2]


def started(e: Evacuations, settled: bool = True, busy: bool = False) -> list[tuple[WorkerId, int]]:
    asked: list[tuple[WorkerId, int]] = []
    epochs = iter(range(7, 100))
    e.start(settled, busy, lambda: next(epochs), lambda w, epoch: asked.append((w, epoch)))
    return asked


def test_steps_are_held_from_the_request_and_the_snapshot_waits_for_them_to_settle() -> None:
    e = Evacuations(lambda: 0.0)
    assert not e.holds_steps
    e.request(W1, MEMBERS)
    assert started(e, settled=False) == [] and e.holds_steps
    assert started(e, settled=True, busy=True) == []  # a checkpoint under way finishes first
    assert started(e) == [(W1, 7)]
    assert started(e) == []  # asked once
    assert e.snapshot_of({"t": "checkpointed", "w": "w1", "epoch": 6}) is None  # another epoch: a checkpoint's
    assert e.snapshot_of({"t": "checkpointed", "w": "w0", "epoch": 7}) is None
    done = e.snapshot_of({"t": "checkpointed", "w": "w1", "epoch": 7})
    assert done is not None and done.worker == W1 and not e.holds_steps


def test_one_at_a_time_in_order_and_never_the_last_worker() -> None:
    e = Evacuations(lambda: 0.0)
    e.request(W1, MEMBERS)
    e.request(W1, MEMBERS)  # asked twice (SIGTERM repeated): once
    e.request(W2, MEMBERS)
    assert started(e) == [(W1, 7)]
    e.snapshot_of({"t": "checkpointed", "w": "w1", "epoch": 7})
    assert started(e) == [(W2, 7)]
    lone = Evacuations(lambda: 0.0)
    assert not lone.request(W0, [W0])  # no one would take its channels: it goes as a loss would
    assert not lone.request(WorkerId("w9"), MEMBERS)  # not a member (still joining, or recovered already)
    assert not lone.holds_steps


def test_a_snapshot_that_never_comes_ends_the_handover_so_steps_are_not_held_for_good() -> None:
    from ftpipeline.coordinator.evacuation import SNAPSHOT_TIMEOUT_S

    now = [0.0]
    e = Evacuations(lambda: now[0])
    assert e.request(W1, MEMBERS)
    assert started(e) == [(W1, 7)]
    now[0] = SNAPSHOT_TIMEOUT_S - 1
    assert e.start(True, False, lambda: 8, lambda w, epoch: None) is None
    now[0] = SNAPSHOT_TIMEOUT_S + 1
    assert e.start(True, False, lambda: 8, lambda w, epoch: None) == W1  # the coordinator kills it: a loss
    assert not e.holds_steps


def test_a_loss_drops_the_leaver_and_another_recovery_asks_the_snapshot_again() -> None:
    e = Evacuations(lambda: 0.0)
    e.request(W1, MEMBERS)
    assert started(e) == [(W1, 7)]
    e.interrupted()  # another worker recovered: channels may have moved onto w1
    assert e.current is not None and e.current.stage is Stage.REQUESTED
    assert e.snapshot_of({"t": "checkpointed", "w": "w1", "epoch": 7}) is None  # the old snapshot is not used
    assert started(e) == [(W1, 7)]
    e.forget(W1)
    assert not e.holds_steps


def test_the_handover_starts_moved_channels_from_the_leavers_snapshots_and_keeps_the_others() -> None:
    last = {"states": {"agg.0": {"step": 10, "path": "epoch-2/state/agg.0"},
                       "agg.1": {"step": 10, "path": "epoch-2/state/agg.1"}}}
    manifest = handover_manifest(last, [{"channel": "agg.1", "step": 14, "path": "epoch-3/state/agg.1", "rows": 5,
                                         "bytes": 9}])
    assert manifest["states"] == {"agg.0": {"step": 10, "path": "epoch-2/state/agg.0"},
                                  "agg.1": {"step": 14, "path": "epoch-3/state/agg.1"}}
    assert handover_manifest(None, []) == {"states": {}}


def test_a_handover_is_described_as_one_not_as_a_recovery() -> None:
    from ftpipeline.coordinator.recovery import RecoveryRecord
    from ftpipeline.lineage.naming import Channel

    record = RecoveryRecord(worker=W1, strategy="evacuation", epoch=3, tasks=(), detected_at=0.0, seconds=0.014,
                            moves={Channel("agg", 1): W0, Channel("src", 1): W2}, rebuilt=(Channel("agg", 1),))
    said = record.describe()
    assert said == "worker w1, asked to leave, handed its 2 channels over in 14 ms (1 state from its snapshot), " \
                   "nothing re-run", said
    assert "recovery" not in said
