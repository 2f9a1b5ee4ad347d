"""CheckpointManager.due: when the coordinator starts a checkpoint (steps, time, request, never two at once)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import pytest

from kazoo.exceptions import ConnectionLoss
from kazoo.retry import KazooRetry, RetryFailedError
from prometheus_client import CollectorRegistry

from ftpipeline.checkpoint.pointer import CheckpointPointer
from ftpipeline.control.store import RunStore
from ftpipeline.coordinator.checkpoints import CheckpointManager
from ftpipeline.coordinator.members import Members
from ftpipeline.coordinator.outages import Backoff, ControlPlane
from ftpipeline.dataflow.graph import Graph
from ftpipeline.lineage.naming import WorkerId
from ftpipeline.lineage.tables import LineageTables
from ftpipeline.obs.metrics import RunMetrics
from ftpipeline.spec.load import parse_pipeline
from ftpipeline.worker.transport import Unreachable
from tests.unit.lineage.history import PIPELINE


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class KnownEpochs:
    """The one pointer call numbering makes: which checkpoints ZooKeeper has committed."""

    def __init__(self, *epochs: int) -> None:
        self.known = sorted(epochs)

    def epochs(self) -> list[int]:
        return self.known


def manager(tmp_path: Path, clock: Clock, pointer: object | None = None, control: ControlPlane | None = None,
            **spec: Any) -> CheckpointManager:
    s = replace(parse_pipeline(PIPELINE, tmp_path, check_entry_point=False), checkpoint_path=tmp_path, **spec)
    # due() reads only the spec, the clock and its own state: the pointer is never called
    pointer = cast(CheckpointPointer, pointer or object())
    return CheckpointManager(s, Graph(s), cast(RunStore, None), cast(LineageTables, None), pointer,
                             RunMetrics(s.name), clock, cast(Members, None), control)


def committed(m: CheckpointManager, boundary: int) -> None:
    m.current = None
    m.last = {"boundary": boundary}


def test_every_n_steps_counts_from_the_last_committed_boundary(tmp_path: Path) -> None:
    m = manager(tmp_path, Clock(), checkpoint_steps=3)
    assert [b for b in range(0, 4) if m.due(b)] == [3]
    m.begin(3, [WorkerId("w0")])
    assert not m.due(6), "never two at once"
    committed(m, 3)
    assert not m.due(5)
    assert m.due(6)


def test_a_boundary_that_falls_during_a_checkpoint_is_deferred_not_skipped(tmp_path: Path) -> None:
    m = manager(tmp_path, Clock(), checkpoint_steps=2)
    m.begin(2, [WorkerId("w0")])
    assert not m.due(4)          # the checkpoint at 2 is still being taken
    committed(m, 2)
    assert m.due(5)              # not only at 6: 3 steps have passed since the last one


def test_a_step_that_carried_only_a_barrier_does_not_make_the_next_checkpoint_due(tmp_path: Path) -> None:
    clock = Clock()
    m = manager(tmp_path, clock, checkpoint_steps=1, checkpoint_ms=1000)
    committed(m, 4)   # the checkpoint at 4 made step 5 go out, with no record and the same watermark
    m.idle_step(5)
    assert not m.due(5), "else each such step makes another: steps and checkpoints back to back, idle"
    clock.now = 60.0
    assert not m.due(5), "nor by time: nothing changed since the last checkpoint"
    assert m.due(6), "a step with records (or a new watermark) counts"


def test_timer_and_request(tmp_path: Path) -> None:
    clock = Clock()
    m = manager(tmp_path, clock, checkpoint_ms=1000)
    assert not m.due(1)
    clock.now = 1.0
    assert m.due(1)
    m.begin(1, [WorkerId("w0")])
    committed(m, 1)
    assert not m.due(2)
    m.requested = True
    assert m.due(2)
    assert not m.due(0), "nothing to checkpoint before the first step"


def test_a_resume_numbers_its_checkpoints_after_every_stored_one(tmp_path: Path) -> None:
    """--from-checkpoint 1 on a fresh command log, with 2..5 in storage: its first checkpoint is 6,
    never a second epoch 2 over the first one's files, and retention counts the stored ones."""
    m = manager(tmp_path, Clock(), KnownEpochs(), checkpoint_steps=2)
    m.found_in_storage({1, 2, 3, 4, 5})
    m.restored(2)
    assert m.begin(4, [WorkerId("w0")]) == 6
    assert m._committed_epochs() == [1, 2, 3, 4, 5]


class CutOff(KnownEpochs):
    """ZooKeeper out of reach for the first ``lost`` calls, as the pointer's own KazooRetry reports it."""

    def __init__(self, lost: int, *epochs: int) -> None:
        super().__init__(*epochs)
        self.lost = lost
        self.calls = 0

    def epochs(self) -> list[int]:
        self.calls += 1
        if self.calls <= self.lost:
            return KazooRetry(max_tries=2, delay=0.0, ignore_expire=False)(self._lost)
        return self.known

    def _lost(self) -> None:
        raise ConnectionLoss()


def test_listing_checkpoints_waits_through_a_zookeeper_outage_instead_of_failing_the_run(tmp_path: Path) -> None:
    """A cut right after a commit: the pointer's retry gives up (RetryFailedError, not ConnectionLoss) and
    the coordinator must pause and list again, not end the run with a traceback."""
    seen: list[tuple[str, bool, str]] = []

    class Reports:
        def on_control_plane(self, component: str, available: bool, message: str) -> None:
            seen.append((component, available, message))

    metrics = RunMetrics("p", CollectorRegistry())
    control = ControlPlane(metrics.control_plane_faults, "p", Reports(), lambda: None, Backoff(0.0, 2.0, 0.0),
                           sleep=lambda s: None)
    pointer = CutOff(3, 1, 2)
    m = manager(tmp_path, Clock(), pointer, control, checkpoint_steps=2)
    assert m._committed_epochs() == [1, 2]
    assert pointer.calls == 4
    assert [(c, a) for c, a, _ in seen] == [("zookeeper", False), ("zookeeper", True)]
    assert "listing committed checkpoints" in seen[0][2]
    with pytest.raises(RetryFailedError):  # without the pause, the same cut ends the run
        manager(tmp_path, Clock(), CutOff(1, 1), None, checkpoint_steps=2)._committed_epochs()


class Worker:
    def __init__(self, name: str, gone: bool = False) -> None:
        self.name, self.gone, self.told = name, gone, []  # type: tuple[str, bool, list[dict[str, Any]]]

    def call(self, action: str, body: dict[str, Any] | None = None, timeout_s: float | None = None) -> None:
        if self.gone:
            raise Unreachable(f"127.0.0.1:1/{self.name}", action, ConnectionRefusedError("Connection refused"))
        self.told.append({"action": action, **(body or {})})


class Workers:
    """The members as CheckpointManager.start sees them: who they are, and a client for each."""

    def __init__(self, *workers: Worker) -> None:
        self.by_name = {WorkerId(w.name): w for w in workers}
        self.workers = list(self.by_name)

    def client(self, worker: WorkerId) -> Worker:
        return self.by_name[worker]

    def call_all(self, workers: list[WorkerId], action: str, body: dict[str, Any] | None = None) -> dict[WorkerId, Any]:
        answers: dict[WorkerId, Any] = {}
        for w in workers:
            try:
                answers[w] = self.by_name[w].call(action, body)
            except Exception as exc:
                answers[w] = exc
        return answers


def test_a_worker_that_does_not_answer_the_checkpoint_call_aborts_the_checkpoint_not_the_run(tmp_path: Path) -> None:
    """Killed a moment before the checkpoint starts (pipelined steps run ahead of the kill): the call is
    refused before the backend reports the loss. The run must go on; the cut could never complete."""
    w0, w1, w2 = Worker("w0"), Worker("w1", gone=True), Worker("w2")
    m = manager(tmp_path, Clock(), checkpoint_steps=2)
    m.members = cast(Members, Workers(w0, w1, w2))
    m.start(2)
    assert m.current is not None and not m.busy, "aborted"
    assert m.needs_settle, "the next checkpoint drains first, as after a loss"
    assert w0.told == [{"action": "checkpoint", "epoch": 1, "settle": False}]
    assert m.due(2) and m.begin(2, [WorkerId("w0")]) == 2, "the next one starts normally, with a new epoch"


def test_a_worker_that_could_not_write_its_snapshot_aborts_the_checkpoint_with_its_error(tmp_path: Path) -> None:
    """Storage gone or read-only under one worker: its report aborts the cut (which could never
    complete), the reason names the worker and the path, and the observer hears of it once."""
    m = manager(tmp_path, Clock(), checkpoint_steps=2)
    m.members = cast(Members, Workers(Worker("w0"), Worker("w1")))
    heard: list[tuple[int, str]] = []
    m.on_aborted = lambda epoch, reason: heard.append((epoch, reason))
    m.start(2)
    error = "NotADirectoryError: [Errno 20] Not a directory: '/data/checkpoints/p/epoch-1/state'"
    m.on_event({"t": "checkpoint_failed", "w": "w1", "epoch": 0, "error": error})
    assert m.busy, "a report for another epoch changes nothing"
    m.on_event({"t": "checkpoint_failed", "w": "w1", "epoch": 1, "error": error})
    assert not m.busy and m.needs_settle
    assert heard == [(1, f"worker w1 could not write to checkpoint storage: {error}")]
    assert m.metrics.checkpoints.labels(m.spec.metrics_label, "aborted")._value.get() == 1
    m.on_event({"t": "checkpoint_failed", "w": "w0", "epoch": 1, "error": error})
    assert len(heard) == 1, "the second worker's report of the same cut is not a second abort"
    assert m.due(2), "the next checkpoint is due at once"


def test_snapshots_of_a_checkpoint_that_did_not_commit_stay_known_until_a_commit_or_a_rollback(tmp_path: Path) -> None:
    """What a lost channel's rebuild may start from (``lineage/planner.py``): each snapshot a worker reported
    whole, even once its checkpoint is aborted (its files stay until the next commit prunes them)."""
    from ftpipeline.lineage.naming import Channel

    m = manager(tmp_path, Clock(), KnownEpochs(), checkpoint_steps=2)
    m.members = cast(Members, Workers(Worker("w0"), Worker("w1")))
    m.start(2)
    snap = {"channel": "agg.1", "step": 2, "path": "epoch-1/state/agg.1", "rows": 5, "bytes": 100}
    empty = {"channel": "agg.0", "step": 2, "path": "", "rows": 0, "bytes": 0}
    m.on_event({"t": "checkpointed", "w": "w1", "epoch": 0, "deficit": 0, "snapshots": [snap]})
    assert m.uncommitted == {}, "another epoch's report"
    m.on_event({"t": "checkpointed", "w": "w1", "epoch": 1, "deficit": 0, "snapshots": [snap, empty]})
    m.abort("worker w0 lost")
    assert m.uncommitted == {Channel("agg", 1): (2, "epoch-1/state/agg.1")}
    m.restored(0)
    assert m.uncommitted == {}, "a rollback's history is not the one the snapshot folded"
