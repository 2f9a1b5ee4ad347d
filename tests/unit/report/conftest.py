"""A timeline fed with the events of a small run (no coordinator): the input of the report's tests."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ftpipeline.coordinator.recovery import RecoveryRecord
from ftpipeline.coordinator.trigger import Reason
from ftpipeline.lineage.naming import Channel, Task, TaskKind, WorkerId
from ftpipeline.report.timeline import Timeline
from ftpipeline.spec.load import parse_pipeline
from ftpipeline.spec.model import PipelineSpec

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "clickstream"
W0, W1, W2 = WorkerId("w0"), WorkerId("w1"), WorkerId("w2")


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def spec() -> PipelineSpec:
    doc = yaml.safe_load((EXAMPLE / "pipeline.yaml").read_text())
    return parse_pipeline(yaml.safe_dump(doc), EXAMPLE, check_entry_point=False)


@pytest.fixture
def clock() -> Clock:
    return Clock()


def recovery_of_w1(detected_at: float) -> RecoveryRecord:
    """w1 lost; lineage re-runs 4 tasks on w0 and w2, moving its two channels there."""
    task = Task(TaskKind.TRANSFORM, "events", 1, 3)
    moves = {Channel("events", 1): W2, Channel("per-user", 1): W0}
    placement = {Channel("events", 0): W0, Channel("events", 1): W2, Channel("events", 2): W2,
                 Channel("per-user", 0): W0, Channel("per-user", 1): W0, Channel("per-user", 2): W2}
    return RecoveryRecord(W1, "lineage", 2, ((W0, task), (W2, task), (W2, task), (W0, task)), moves, detected_at,
                          seconds=0.25, planned_rows=9000, lost_rows=9000, placement=placement)


def play(timeline: Timeline, clock: Clock) -> RecoveryRecord:
    """Workers start, five steps commit, w1 is lost in step 3, ZooKeeper is out of reach for a while, a
    checkpoint commits and one is aborted; returns the recovery's record."""
    timeline.on_workers_starting([W0, W1, W2])
    for i, w in enumerate((W0, W1, W2)):
        clock.advance(1.0)
        timeline.on_worker_joined(w, i + 1, 3)
    for step in (1, 2):
        clock.advance(0.1)
        timeline.on_step_started(step, Reason.RECORDS, 3000)
        clock.advance(0.5)
        timeline.on_step_committed(step, 3000, 0.5)
    timeline.on_checkpoint({"epoch": 1, "boundary": 2, "seconds": 0.3, "bytes": 2048, "inflight": 0, "kept": [1]})
    clock.advance(0.1)
    timeline.on_step_started(3, Reason.TIMER, 2500)
    clock.advance(0.2)
    timeline.on_worker_lost(W1)
    detected_at = clock.now
    clock.advance(0.25)
    record = recovery_of_w1(detected_at)
    timeline.on_recovery(record)
    timeline.on_checkpoint_aborted(2, "worker w1 lost")
    clock.advance(1.0)
    record.to_commit_seconds = clock.now - detected_at  # as the coordinator sets it, just before the commit
    timeline.on_step_committed(3, 2500, 1.45)
    timeline.on_control_plane("zookeeper", False, "zookeeper unreachable, the run is paused")
    clock.advance(0.5)
    timeline.on_control_plane("zookeeper", False, "zookeeper unreachable, the run is paused")
    clock.advance(1.5)
    timeline.on_control_plane("zookeeper", True, "zookeeper answers again after 2.0 s")
    for step in (4, 5):
        timeline.on_step_started(step, Reason.RECORDS, 3000)
        clock.advance(0.4)
        timeline.on_step_committed(step, 3000, 0.4)
    return record
