"""plan_restore: the tasks that bring each stateful channel from its snapshot to the cut's boundary."""

from __future__ import annotations

import pytest

from ftpipeline.checkpoint.restore import Cut, plan_restore
from ftpipeline.dataflow.graph import Graph
from ftpipeline.lineage.naming import Channel, ObjectName, Task, TaskKind
from ftpipeline.lineage.planner import PlanningError
from tests.unit.lineage.history import PIPELINE, graph

AGG0, AGG1 = Channel("agg", 0), Channel("agg", 1)
EPOCH = 7

# events -> clean -> agg -> top (a second aggregate) -> out: aggregate outputs are needed too.
CHAINED = PIPELINE.replace(
    "    - {name: out, parallelism: 2, inputs: [{stage: agg}], sink: {parquet: {path: o}}}",
    "    - name: top\n"
    "      parallelism: 2\n"
    "      inputs: [{stage: agg}]\n"
    "      aggregate: {keyBy: [k], aggregations: [{name: m, op: count}]}\n"
    "    - {name: out, parallelism: 2, inputs: [{stage: top}], sink: {parquet: {path: o}}}",
)


def ranges_of(ch: Channel, step: int) -> tuple[tuple[int, int, int], ...]:
    return ((ch.index, step * 100 + ch.index, step * 100 + 50 + ch.index),)


def plan(g: Graph, cut: Cut) -> list[Task]:
    return plan_restore(g, cut, g.task_kind, ranges_of, EPOCH)


def name(actor: str, ch: int, step: int, target: str, pf: int, tc: int) -> str:
    return ObjectName(actor, ch, step, target, pf, tc).key()


def agg_inputs(g: Graph, ch: int, steps: range) -> set[str]:
    return {o.key() for s in steps for o in g.inputs_of(Task(TaskKind.AGGREGATE, "agg", ch, s))}


def spans(tasks: list[Task]) -> list[tuple[str, str, int, int]]:
    return [(t.kind.value, t.stage, t.channel, t.step) for t in tasks]


def test_lockstep_cut_needs_no_tasks() -> None:
    g = graph()
    cut = Cut(boundary=5, states={AGG0: 5, AGG1: 5}, gt_last=5, inflight=frozenset())
    assert plan(g, cut) == []


def test_channel_behind_with_inputs_in_flight_reruns_only_its_steps() -> None:
    g = graph()
    inflight = frozenset(agg_inputs(g, 1, range(4, 6)))
    cut = Cut(boundary=5, states={AGG0: 5, AGG1: 3}, gt_last=5, inflight=inflight)
    tasks = plan(g, cut)
    assert spans(tasks) == [("aggregate", "agg", 1, 4), ("aggregate", "agg", 1, 5)]
    assert all(t.emit == frozenset() for t in tasks)       # the sinks released past the boundary
    assert all(t.ranges is None for t in tasks)


def test_inputs_not_in_flight_are_regenerated_down_to_the_sources() -> None:
    g = graph()
    # only clean.0's share crossed the cut; clean.1 -> agg.1 for steps 4..5 must be regenerated
    inflight = frozenset(o for o in agg_inputs(g, 1, range(4, 6)) if o.startswith("clean.0."))
    cut = Cut(boundary=5, states={AGG0: 5, AGG1: 3}, gt_last=5, inflight=inflight)
    tasks = plan(g, cut)
    assert spans(tasks) == [
        ("aggregate", "agg", 1, 4), ("transform", "clean", 1, 4), ("source", "events", 1, 4),
        ("aggregate", "agg", 1, 5), ("transform", "clean", 1, 5), ("source", "events", 1, 5),
    ]
    by = {(t.stage, t.step): t for t in tasks}
    for step in (4, 5):
        assert by["clean", step].emit == frozenset({name("clean", 1, step, "agg", 1, 1)})
        assert by["events", step].emit == frozenset({name("events", 1, step, "clean", 0, 1)})
        assert by["events", step].ranges == ranges_of(Channel("events", 1), step)
        assert by["clean", step].ranges is None
    assert ("transform", "clean", 0, 4) not in spans(tasks)


def test_regeneration_emits_the_union_of_what_several_channels_need() -> None:
    g = graph()
    cut = Cut(boundary=3, states={AGG0: 2, AGG1: 2}, gt_last=3, inflight=frozenset())
    tasks = plan(g, cut)
    cleans = {t.channel: t for t in tasks if t.stage == "clean"}
    assert set(cleans) == {0, 1}
    for ch in (0, 1):
        assert cleans[ch].step == 3
        assert cleans[ch].emit == frozenset({name("clean", ch, 3, "agg", 1, 0), name("clean", ch, 3, "agg", 1, 1)})
    # each regenerated task is planned once
    assert len(spans(tasks)) == len(set(spans(tasks))) == 2 + 2 + 2


def test_channel_without_snapshot_replays_from_the_first_step() -> None:
    g = graph()
    inflight = frozenset(agg_inputs(g, 1, range(1, 3)))
    tasks = plan(g, Cut(boundary=2, states={AGG0: 2, AGG1: 0}, gt_last=2, inflight=inflight))
    assert spans(tasks) == [("aggregate", "agg", 1, 1), ("aggregate", "agg", 1, 2)]


def test_all_tasks_are_recovery_tasks_of_the_epoch_sorted_by_step() -> None:
    g = graph()
    cut = Cut(boundary=6, states={AGG0: 2, AGG1: 4}, gt_last=7, inflight=frozenset())
    tasks = plan(g, cut)
    assert tasks
    assert all(t.recovery and t.epoch == EPOCH for t in tasks)
    keys = [(t.step, t.stage, t.channel) for t in tasks]
    assert keys == sorted(keys)
    assert {t.step for t in tasks if t.channel == 0 and t.stage == "agg"} == {3, 4, 5, 6}
    assert {t.step for t in tasks if t.channel == 1 and t.stage == "agg"} == {5, 6}
    assert all(t.stage != "out" for t in tasks)             # sinks are never replayed below gt_last


def test_needed_aggregate_output_behind_its_snapshot_is_rerun_with_emit() -> None:
    g = graph(CHAINED)
    tops = {Channel("top", 0): 3, Channel("top", 1): 5}
    # agg.0's own inputs and agg.1's outputs for top.0 (folded into agg.1's snapshot) were saved
    saved = agg_inputs(g, 0, range(4, 6)) | {name("agg", 1, s, "top", 1, 0) for s in (4, 5)}
    cut = Cut(boundary=5, states={AGG0: 3, AGG1: 5, **tops}, gt_last=5, inflight=frozenset(saved))
    tasks = plan(g, cut)
    assert spans(tasks) == [
        ("aggregate", "agg", 0, 4), ("aggregate", "top", 0, 4),
        ("aggregate", "agg", 0, 5), ("aggregate", "top", 0, 5),
    ]
    by = {(t.stage, t.channel, t.step): t for t in tasks}
    # top.0 needs agg.0@4..5, which come after agg.0's snapshot: the re-runs emit exactly that
    assert by["agg", 0, 4].emit == frozenset({name("agg", 0, 4, "top", 1, 0)})
    assert by["agg", 0, 5].emit == frozenset({name("agg", 0, 5, "top", 1, 0)})
    assert by["top", 0, 4].emit == frozenset()


def test_needed_aggregate_output_folded_into_a_snapshot_must_be_in_flight() -> None:
    g = graph(CHAINED)
    states = {AGG0: 5, AGG1: 5, Channel("top", 0): 4, Channel("top", 1): 5}
    with pytest.raises(PlanningError, match=r"agg\.[01]\.5\.top\.1\.0 is folded into agg\.[01]'s snapshot"):
        plan(g, Cut(boundary=5, states=states, gt_last=5, inflight=frozenset()))
    saved = frozenset({name("agg", 0, 5, "top", 1, 0), name("agg", 1, 5, "top", 1, 0)})
    tasks = plan(g, Cut(boundary=5, states=states, gt_last=5, inflight=saved))
    assert spans(tasks) == [("aggregate", "top", 0, 5)]
