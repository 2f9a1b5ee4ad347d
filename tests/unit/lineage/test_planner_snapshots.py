"""plan_recovery's ``snapshots``: a lost stateful channel is rebuilt from its newest committed snapshot."""

from __future__ import annotations

import pytest

from ftpipeline.lineage.cemetery import IntervalSet
from ftpipeline.lineage.naming import Channel, ObjectName, Task, TaskKind
from ftpipeline.lineage.planner import PlanningError, RecoveryPlan, plan_recovery

from .history import W0, W1, History, graph

AGG1 = Channel("agg", 1)
SNAPSHOT = "epoch-1/state/agg.1.parquet"


def agg1_inputs(h: History, steps: range) -> list[ObjectName]:
    return [o for s in steps for o in h.g.inputs_of(Task(TaskKind.AGGREGATE, "agg", 1, s))]


def checkpointed_history() -> History:
    """Steps 1..4 ran on w0/w1; a checkpoint covered agg.1 up to step 2, so its inputs 1..2 were collected."""
    h = History(graph(), [W0, W1])
    for step in range(1, 5):
        h.run_step(step)
    h.gc()
    for obj in agg1_inputs(h, range(1, 3)):
        h.ct.setdefault(obj.edge.key(), IntervalSet()).add(obj.seq)
        h.pt.pop(obj.key(), None)
        for names in h.not_.values():
            names.discard(obj.key())
    return h


def task_steps(plan: RecoveryPlan) -> set[int]:
    return {s for _, t in plan.tasks for s in t.steps}


def test_rebuild_starts_after_the_snapshot() -> None:
    h = checkpointed_history()
    assert h.placement[AGG1] == W1
    plan = plan_recovery(h.g, h.view(), W1, [W0], epoch=1, snapshots={AGG1: (2, SNAPSHOT)})
    rebuilds = [t for _, t in plan.tasks if t.kind is TaskKind.REBUILD]
    assert [(t.stage, t.channel, t.first, t.step, t.base) for t in rebuilds] == [("agg", 1, 3, 4, SNAPSHOT)]
    assert plan.rebuilt == (AGG1,)
    # nothing before the snapshot is regenerated or read
    assert task_steps(plan) == {3, 4}
    assert not {o.key() for o in agg1_inputs(h, range(1, 3))} & plan.resurrect
    # the rebuild's lost inputs after the snapshot are regenerated
    regen = sorted((t.stage, t.step) for _, t in plan.tasks if t.kind is not TaskKind.REBUILD)
    assert regen == [("clean", 3), ("clean", 4), ("events", 3), ("events", 4)]


def test_without_the_snapshot_the_collected_inputs_are_regenerated() -> None:
    """The control case: the same tables need steps 1..2 when no snapshot is known."""
    h = checkpointed_history()
    plan = plan_recovery(h.g, h.view(), W1, [W0], epoch=1)
    rebuilds = [t for _, t in plan.tasks if t.kind is TaskKind.REBUILD]
    assert [(t.first, t.step, t.base) for t in rebuilds] == [(1, 4, None)]
    assert {1, 2} <= task_steps(plan)
    assert ("clean", 0, 1) in {(t.stage, t.channel, t.step) for _, t in plan.tasks}


def test_snapshot_of_the_last_applied_step_needs_no_inputs() -> None:
    h = checkpointed_history()
    plan = plan_recovery(h.g, h.view(), W1, [W0], epoch=1, snapshots={AGG1: (4, SNAPSHOT)})
    assert [(t.kind, t.base) for _, t in plan.tasks] == [(TaskKind.REBUILD, SNAPSHOT)]
    assert task_steps(plan) == set()
    assert plan.resurrect == frozenset()


def test_snapshot_of_another_channel_is_not_used() -> None:
    h = checkpointed_history()
    plan = plan_recovery(h.g, h.view(), W1, [W0], epoch=1,
                         snapshots={Channel("agg", 0): (2, "epoch-1/state/agg.0.parquet")})
    rebuilds = [t for _, t in plan.tasks if t.kind is TaskKind.REBUILD]
    assert [(t.channel, t.first, t.step, t.base) for t in rebuilds] == [(1, 1, 4, None)]
    assert {1, 2} <= task_steps(plan)


def unread_output_history() -> tuple[History, str]:
    """Steps 1..2 ran; of step 3, agg.1's output to out.1 is held by w1 alone and not read yet."""
    h = History(graph(), [W0, W1])
    h.run_step(1)
    h.run_step(2)
    h.gc()
    h.schedule(3)
    for stage in ("events", "clean", "agg"):
        for ch in (0, 1):
            h.complete(h.task(stage, ch, 3))
    h.complete(h.task("out", 0, 3))                       # out.1@3 has not consumed agg.1@3 yet
    return h, ObjectName("agg", 1, 3, "out", 0, 1).key()


def test_snapshot_newer_than_a_step_to_redo_is_a_planning_error() -> None:
    """agg.1@3's output died unconsumed, so step 3 must be re-run, but the snapshot already folded it."""
    h, lost = unread_output_history()
    assert h.pt[lost] == W1 and not h.view().consumed(lost)
    with pytest.raises(PlanningError, match="agg.1 must redo step 3, older than its snapshot at 3"):
        plan_recovery(h.g, h.view(), W1, [W0], epoch=1, snapshots={AGG1: (3, SNAPSHOT)})
    # one step older, the snapshot is usable: rebuild 3..2 is empty, step 3 is re-run emitting the lost output
    plan = plan_recovery(h.g, h.view(), W1, [W0], epoch=1, snapshots={AGG1: (2, SNAPSHOT)})
    redo = [t for _, t in plan.tasks if t.kind is TaskKind.AGGREGATE and t.ref == AGG1]
    assert [(t.step, t.emit) for t in redo] == [(3, frozenset({lost}))]


NEWER = "epoch-2/state/agg.1.parquet"


def test_a_snapshot_of_a_checkpoint_not_committed_is_a_closer_base() -> None:
    """A checkpoint at step 3 was under way (agg.1 wrote its snapshot) when w1 died: the rebuild starts there."""
    h = checkpointed_history()
    plan = plan_recovery(h.g, h.view(), W1, [W0], epoch=1, snapshots={AGG1: (2, SNAPSHOT)}, newer={AGG1: (3, NEWER)})
    rebuilds = [t for _, t in plan.tasks if t.kind is TaskKind.REBUILD]
    assert [(t.first, t.step, t.base) for t in rebuilds] == [(4, 4, NEWER)]
    assert task_steps(plan) == {4}  # step 3's inputs are neither read nor regenerated
    regen = sorted((t.stage, t.step) for _, t in plan.tasks if t.kind is not TaskKind.REBUILD)
    assert regen == [("clean", 4), ("events", 4)]


@pytest.mark.parametrize("newer", [(5, NEWER), (2, NEWER), (1, NEWER), (3, "")])
def test_a_newer_snapshot_past_what_the_channel_applied_or_not_past_the_committed_one_is_not_used(
        newer: tuple[int, str]) -> None:
    h = checkpointed_history()
    plan = plan_recovery(h.g, h.view(), W1, [W0], epoch=1, snapshots={AGG1: (2, SNAPSHOT)}, newer={AGG1: newer})
    rebuilds = [t for _, t in plan.tasks if t.kind is TaskKind.REBUILD]
    assert [(t.first, t.step, t.base) for t in rebuilds] == [(3, 4, SNAPSHOT)]


def test_a_newer_snapshot_past_a_lost_output_still_to_be_read_is_not_used() -> None:
    """agg.1@3's output died unconsumed: step 3 is re-run, so the snapshot that folded it cannot be the base
    (the committed one is, and nothing fails to plan)."""
    h, lost = unread_output_history()
    plan = plan_recovery(h.g, h.view(), W1, [W0], epoch=1, snapshots={AGG1: (2, SNAPSHOT)}, newer={AGG1: (3, NEWER)})
    rebuilds = [t for _, t in plan.tasks if t.kind is TaskKind.REBUILD]
    assert [(t.first, t.step, t.base) for t in rebuilds] == [(3, 2, SNAPSHOT)]
    redo = [t for _, t in plan.tasks if t.kind is TaskKind.AGGREGATE and t.ref == AGG1]
    assert [(t.step, t.emit) for t in redo] == [(3, frozenset({lost}))]
