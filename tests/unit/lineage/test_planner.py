"""The recovery planner on hand-written table states, including the seed's edge cases."""

from __future__ import annotations

import pytest

from ftpipeline.lineage.naming import Channel, ObjectName, Task, TaskKind
from ftpipeline.lineage.planner import PlanningError, plan_recovery

from .history import W0, W1, W2, History, graph


def kinds(plan, worker=None):
    return sorted(
        (t.kind.value, t.stage, t.channel, t.first, t.step)
        for w, t in plan.tasks
        if worker is None or w == worker
    )


def mid_step_history() -> History:
    """Two workers, steps 1-2 committed, step 3 half done; w1 is about to die."""
    h = History(graph(), [W0, W1])
    h.run_step(1)
    h.run_step(2)
    h.gc()
    h.schedule(3)
    h.complete(h.task("events", 0, 3))
    h.complete(h.task("events", 1, 3))
    h.complete(h.task("clean", 0, 3))
    return h


def test_stateless_loss_relaunches_pending_and_regenerates_only_needed_inputs():
    h = mid_step_history()
    plan = plan_recovery(h.g, h.view(), W1, [W0], epoch=1)
    assert plan.moves == {Channel(s, 1): W0 for s in ("events", "clean", "agg", "out")}
    got = kinds(plan, W0)
    # pending work of w1 for step 3 is re-launched on the survivor
    assert ("transform", "clean", 1, 3, 3) in got
    assert ("aggregate", "agg", 1, 3, 3) in got
    assert ("sink", "out", 1, 3, 3) in got
    # clean.1@3 needs events.1@3, which died with w1: regenerated from its offsets
    regen = [t for _, t in plan.tasks if t.kind is TaskKind.SOURCE and t.step == 3]
    assert [(t.channel, t.step, t.ranges) for t in regen] == [(1, 3, ((1, 300, 350),))]
    assert regen[0].emit == {ObjectName("events", 1, 3, "clean", 0, 1).key()}
    # nothing of step 3 that survivors already produced is recomputed
    assert ("source", "events", 0, 3, 3) not in got and ("transform", "clean", 0, 3, 3) not in got
    assert set(plan.replaced) == {t.id for t in h.ntt[W1]}
    assert all(t.recovery and t.epoch == 1 for _, t in plan.tasks)


def test_stateful_channel_is_rebuilt_from_kept_inputs_recursively():
    h = mid_step_history()
    plan = plan_recovery(h.g, h.view(), W1, [W0], epoch=1)
    rebuild = [t for _, t in plan.tasks if t.kind is TaskKind.REBUILD]
    assert [(t.stage, t.channel, t.first, t.step) for t in rebuild] == [("agg", 1, 1, 2)]
    assert plan.rebuilt == (Channel("agg", 1),)
    # the rebuild reads clean.{0,1} -> agg.1 for steps 1..2; clean.1's copies died with w1
    # (kept, never consumed into the cemetery), so clean.1@1..2 are regenerated, which in
    # turn need events.1@1..2: consumed and collected long ago -> regenerated from offsets.
    got = kinds(plan)
    for step in (1, 2):
        assert ("transform", "clean", 1, step, step) in got
        assert ("source", "events", 1, step, step) in got
        assert ("transform", "clean", 0, step, step) not in got  # present on w0
    cleans = {t.step: t.emit for _, t in plan.tasks if t.kind is TaskKind.TRANSFORM and t.step < 3}
    assert cleans[1] == {ObjectName("clean", 1, 1, "agg", 1, 1).key()}
    # inputs the plan relies on are resurrected, including the consumed events objects
    assert ObjectName("events", 1, 1, "clean", 0, 1).key() in plan.resurrect
    assert ObjectName("clean", 0, 2, "agg", 1, 1).key() in plan.resurrect


def test_lost_objects_no_current_task_needs_are_not_regenerated():
    """clean.1 -> agg.0 for steps 1-2 died with w1 but agg.0 (on w0) is alive: lazily kept."""
    h = mid_step_history()
    plan = plan_recovery(h.g, h.view(), W1, [W0], epoch=1)
    emitted = set().union(*(t.emit or set() for _, t in plan.tasks))
    for step in (1, 2):
        assert ObjectName("clean", 1, step, "agg", 1, 0).key() not in emitted
    assert ObjectName("clean", 1, 1, "agg", 1, 0).key() in plan.lost


def test_input_in_cemetery_but_still_present_is_used_not_regenerated():
    """Seed edge case: an input consumed (in CT) but not yet collected (in PT)."""
    h = History(graph(), [W0, W1])
    h.run_step(1)  # no gc: consumed objects are still on their workers
    h.schedule(2)
    h.complete(h.task("events", 0, 2))
    h.complete(h.task("events", 1, 2))
    h.complete(h.task("clean", 1, 2))  # consumed events.1@2 into the cemetery
    # w1 dies; agg.0@2 on w0 needs clean.1@2 -> agg.0, which died -> regenerate clean.1@2,
    # whose input events.1@2 is in the cemetery but still present on w1... also dead.
    # Use w0's input instead: clean.0@2 consumed events.0@2 (present on w0, in CT).
    h.complete(h.task("clean", 0, 2))
    h.ntt[W0].add(h.task("clean", 0, 2))  # pretend its completion must be redone (second attempt)
    view = h.view()
    name = ObjectName("events", 0, 2, "clean", 0, 0).key()
    assert view.consumed(name) and view.pt[name] == W0
    plan = plan_recovery(h.g, view, W1, [W0], epoch=1)
    sources = [(t.channel, t.step) for _, t in plan.tasks if t.kind is TaskKind.SOURCE]
    assert (0, 2) not in sources
    # events.1@2 is in the cemetery AND lost with w1: regenerated
    assert (1, 2) in sources


def test_input_on_dead_node_needed_by_a_survivor_is_regenerated():
    h = History(graph(), [W0, W1])
    h.run_step(1)
    h.gc()
    h.schedule(2)
    for ch in (0, 1):
        h.complete(h.task("events", ch, 2))
        h.complete(h.task("clean", ch, 2))
    h.complete(h.task("agg", 1, 2))  # w1 produced agg.1@2 -> out.1, not consumed yet
    plan = plan_recovery(h.g, h.view(), W1, [W0], epoch=1)
    # agg.1 must re-run step 2 to re-create its lost output, after rebuilding step 1's state
    assert ("rebuild", "agg", 1, 1, 1) in kinds(plan)
    redo = [t for _, t in plan.tasks if t.kind is TaskKind.AGGREGATE and t.channel == 1]
    assert [(t.step, t.emit) for t in redo] == [(2, {ObjectName("agg", 1, 2, "out", 0, 1).key()})]
    # agg.0@2 on w0 needs clean.1@2 -> agg.0, which w1 had produced: regenerated
    assert ("transform", "clean", 1, 2, 2) in kinds(plan)


def test_second_failure_during_recovery_replans_the_first_plans_tasks():
    h = History(graph(), [W0, W1, W2])
    h.run_step(1)
    h.gc()
    h.schedule(2)
    first = plan_recovery(h.g, h.view(), W2, [W0, W1], epoch=1)
    # apply the first plan to the history: w2's channels now belong to survivors
    h.placement = dict(first.placement)
    h.ntt.pop(W2, None)
    for worker, task in first.tasks:
        h.ntt.setdefault(worker, set()).add(task)
    for name in first.lost:
        h.pt.pop(name, None)
    h.not_.pop(W2, None)
    h.workers = [W0, W1]
    # w1 dies before running anything of the first plan
    second = plan_recovery(h.g, h.view(), W1, [W0], epoch=2)
    assert all(w == W0 for w, _ in second.tasks)
    first_on_w1 = {(t.kind, t.stage, t.channel, t.first, t.step) for w, t in first.tasks if w == W1}
    second_all = {(t.kind, t.stage, t.channel, t.first, t.step) for _, t in second.tasks}
    assert first_on_w1 <= second_all
    # a rebuild that never ran is re-launched once, not planned twice
    rebuilds = [t for _, t in second.tasks if t.kind is TaskKind.REBUILD]
    assert len({t.ref for t in rebuilds}) == len(rebuilds)
    assert all(t.epoch == 2 for _, t in second.tasks)


def test_object_without_lineage_is_a_planning_error():
    h = mid_step_history()
    view = h.view()
    lt = dict(view.lt)
    for name in list(lt):
        if name.startswith("clean.1."):
            del lt[name]
    from dataclasses import replace

    with pytest.raises(PlanningError, match="no lineage"):
        plan_recovery(h.g, replace(view, lt=lt), W1, [W0], epoch=1)


def test_buffered_rows_count_what_the_dead_worker_held():
    h = mid_step_history()
    plan = plan_recovery(h.g, h.view(), W1, [W0], epoch=1)
    assert plan.buffered_rows == 10 * len(h.not_[W1])
    assert plan.planned_rows > 0


def test_task_ids_of_relaunches_differ_from_the_originals():
    t = Task(TaskKind.TRANSFORM, "clean", 1, 3)
    assert t.for_recovery(1).id != t.id
    assert Task.from_json(t.for_recovery(2, frozenset({"a"})).to_json()) == t.for_recovery(2, frozenset({"a"}))


def test_a_task_whose_twin_is_pending_on_a_survivor_runs_beside_it():
    """An earlier plan left clean.1@1 (writing only its output for agg.0) pending on w0; the next loss needs
    clean.1@1's output for agg.1 too. Both read events.1@1: the new one runs on w0, where the first of the
    two to finish leaves the input for the other (complete_task.lua), not on w2, where step 1 would go."""
    h = History(graph(), [W0, W1, W2])
    h.run_step(1)
    h.run_step(2)
    h.gc()
    twin = Task(TaskKind.TRANSFORM, "clean", 1, 1, recovery=True, epoch=1,
                emit=frozenset({ObjectName("clean", 1, 1, "agg", 1, 0).key()}))
    h.ntt.setdefault(W0, set()).add(twin)
    plan = plan_recovery(h.g, h.view(), W1, [W0, W2], epoch=2)
    [(where, task)] = [(w, t) for w, t in plan.tasks if t.kind is TaskKind.TRANSFORM and t.step == 1]
    assert task.emit == {ObjectName("clean", 1, 1, "agg", 1, 1).key()}
    assert where == W0
    # without the twin, step 1's regeneration goes to w2
    h.ntt[W0].discard(twin)
    plan = plan_recovery(h.g, h.view(), W1, [W0, W2], epoch=2)
    assert [w for w, t in plan.tasks if t.kind is TaskKind.TRANSFORM and t.step == 1] == [W2]


TWO_STATEFUL = """
apiVersion: ftpipeline.io/v1alpha1
kind: FTPipeline
metadata: {name: t}
spec:
  image: x
  entryPoint: m.py
  workers: 2
  stages:
    - {name: events, parallelism: 2, source: {generator: {function: gen, rowsPerStep: 100}}}
    - name: first
      parallelism: 2
      inputs: [{stage: events}]
      aggregate: {keyBy: [k], aggregations: [{name: n, op: count}]}
    - name: second
      parallelism: 2
      inputs: [{stage: first}]
      aggregate: {keyBy: [n], aggregations: [{name: m, op: count}]}
    - {name: out, parallelism: 2, inputs: [{stage: second}], sink: {parquet: {path: o}}}
"""


def test_a_stateful_consumer_lost_with_its_stateful_producer_gets_every_step_since_its_snapshot():
    """Both stateful stages' channel 1 die with w1, no checkpoint yet: the consumer's rebuild folds steps 1-3,
    so the producer must emit its lost outputs of those steps while it is rebuilt (a rebuild up to step 0,
    then its steps re-run, emitting), not be re-run for old steps after a rebuild that passed them (those
    re-runs could never be handed out: the run hung, examples/ad-clicks with a kill)."""
    h = History(graph(TWO_STATEFUL), [W0, W1])
    for step in (1, 2, 3):
        h.run_step(step)
    plan = plan_recovery(h.g, h.view(), W1, [W0], epoch=1)
    first = sorted((t.kind.value, t.first, t.step) for _, t in plan.tasks if t.stage == "first" and t.channel == 1)
    assert first == [("aggregate", 1, 1), ("aggregate", 2, 2), ("aggregate", 3, 3), ("rebuild", 1, 0)], first
    emitted = {t.step: t.emit for _, t in plan.tasks if t.stage == "first" and t.kind is TaskKind.AGGREGATE}
    assert all(ObjectName("first", 1, s, "second", 1, 1).key() in emitted[s] for s in (1, 2, 3)), emitted
