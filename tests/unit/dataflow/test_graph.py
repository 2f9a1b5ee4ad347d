"""The dataflow graph: stage order, the objects each task reads and writes, the tasks of a step."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from ftpipeline.dataflow.graph import Graph
from ftpipeline.lineage.naming import Channel, ObjectName, Task, TaskKind
from ftpipeline.spec.load import parse_pipeline
from ftpipeline.spec.model import Edge, Partition

# events(2) -forward-> clean(2) -hash-> agg(3) -forward-> out(3)
PIPELINE = """
apiVersion: ftpipeline.io/v1alpha1
kind: FTPipeline
metadata: {name: g}
spec:
  image: x
  entryPoint: m.py
  workers: 2
  stages:
    - {name: events, parallelism: 2, source: {generator: {function: gen, rowsPerStep: 100}}}
    - {name: clean, parallelism: 2, inputs: [{stage: events}], transform: {function: f}}
    - name: agg
      parallelism: 3
      inputs: [{stage: clean}]
      aggregate: {keyBy: [k], aggregations: [{name: n, op: count}]}
    - {name: out, parallelism: 3, inputs: [{stage: agg}], sink: {parquet: {path: o}}}
"""

# Declared out of order; two sources and a broadcast edge.
SCRAMBLED = """
apiVersion: ftpipeline.io/v1alpha1
kind: FTPipeline
metadata: {name: s}
spec:
  image: x
  entryPoint: m.py
  workers: 2
  stages:
    - {name: out, parallelism: 2, inputs: [{stage: join}], sink: {parquet: {path: o}}}
    - {name: join, parallelism: 2, inputs: [{stage: left}, {stage: dims, partition: broadcast}], transform: {function: f}}
    - {name: left, parallelism: 2, inputs: [{stage: raw}], transform: {function: f}}
    - {name: dims, parallelism: 1, source: {generator: {function: gen, rowsPerStep: 10}}}
    - {name: raw, parallelism: 2, source: {generator: {function: gen, rowsPerStep: 10}}}
"""

FORWARD, HASH, BROADCAST = Partition.FORWARD.number, Partition.HASH.number, Partition.BROADCAST.number


def graph(text: str = PIPELINE) -> Graph:
    return Graph(parse_pipeline(text, Path("/tmp"), check_entry_point=False))


def task(g: Graph, stage: str, channel: int, step: int, **kw) -> Task:
    return Task(g.task_kind(stage), stage, channel, step, **kw)


def test_partition_numbers() -> None:
    assert (FORWARD, HASH, BROADCAST) == (0, 1, 2)


# -- structure --------------------------------------------------------------------


def test_order_of_a_declared_in_order_pipeline() -> None:
    assert graph().order == ("events", "clean", "agg", "out")
    assert graph().rank("agg") == 2


def test_order_is_topological_whatever_the_declaration() -> None:
    g = graph(SCRAMBLED)
    order = g.order
    assert sorted(order) == sorted(s.name for s in g.spec.stages)
    for name in order:
        for edge in g.stage(name).inputs:
            assert order.index(edge.upstream) < order.index(name), (edge.upstream, name)
    # ties keep declaration order: dims is declared before raw
    assert order == ("dims", "raw", "left", "join", "out")


def test_channels_sources_sinks_and_state() -> None:
    g = graph()
    assert g.channels() == [Channel("events", 0), Channel("events", 1), Channel("clean", 0), Channel("clean", 1)] + [
        Channel(s, i) for s in ("agg", "out") for i in range(3)
    ]
    assert [s.name for s in g.sources()] == ["events"]
    assert [s.name for s in g.sinks()] == ["out"]
    assert [s for s in g.order if g.is_stateful(s)] == ["agg"]
    assert [g.task_kind(s) for s in g.order] == [TaskKind.SOURCE, TaskKind.TRANSFORM, TaskKind.AGGREGATE, TaskKind.SINK]
    assert [(e.upstream, e.downstream) for e in g.downstream("clean")] == [("clean", "agg")]
    assert g.downstream("out") == []


# -- objects --------------------------------------------------------------------------


def test_source_task_reads_nothing() -> None:
    g = graph()
    assert g.inputs_of(task(g, "events", 1, 4)) == []


def test_forward_edge_one_object_each_way() -> None:
    g = graph()
    assert g.outputs_of(task(g, "events", 1, 4)) == [ObjectName("events", 1, 4, "clean", FORWARD, 1)]
    assert g.inputs_of(task(g, "clean", 1, 4)) == [ObjectName("events", 1, 4, "clean", FORWARD, 1)]


def test_hash_edge_writes_to_every_downstream_channel() -> None:
    g = graph()
    outputs = g.outputs_of(task(g, "clean", 0, 4))
    assert outputs == [ObjectName("clean", 0, 4, "agg", HASH, tc) for tc in range(3)]


def test_hash_edge_reads_from_every_upstream_channel() -> None:
    g = graph()
    inputs = g.inputs_of(task(g, "agg", 2, 4))
    assert inputs == [ObjectName("clean", uc, 4, "agg", HASH, 2) for uc in range(2)]


def test_every_output_is_the_input_of_exactly_one_task() -> None:
    g = graph()
    step = 3
    tasks = g.step_tasks(step, {})
    produced = [o for t in tasks for o in g.outputs_of(t)]
    consumed = [o for t in tasks for o in g.inputs_of(t)]
    assert len(produced) == len(set(produced))
    assert sorted(produced) == sorted(consumed)
    assert len(produced) == 2 + 2 * 3 + 3  # forward 2, hash 2x3, forward 3


def test_broadcast_edge_objects() -> None:
    g = graph(SCRAMBLED)
    assert g.outputs_of(task(g, "dims", 0, 1)) == [ObjectName("dims", 0, 1, "join", BROADCAST, tc) for tc in range(2)]
    assert g.inputs_of(task(g, "join", 1, 1)) == [
        ObjectName("left", 1, 1, "join", FORWARD, 1),
        ObjectName("dims", 0, 1, "join", BROADCAST, 1),
    ]


def test_sink_has_no_outputs() -> None:
    g = graph()
    sink = task(g, "out", 2, 5)
    assert g.outputs_of(sink) == []
    assert g.inputs_of(sink) == [ObjectName("agg", 2, 5, "out", FORWARD, 2)]


def test_rebuild_task_reads_steps_first_to_step_and_writes_nothing() -> None:
    g = graph()
    rebuild = Task(TaskKind.REBUILD, "agg", 1, 3, first=1)
    assert g.inputs_of(rebuild) == [
        ObjectName("clean", uc, step, "agg", HASH, 1) for step in (1, 2, 3) for uc in range(2)
    ]
    assert g.outputs_of(rebuild) == []


def test_rebuild_task_of_no_steps_reads_nothing() -> None:
    g = graph()
    assert g.inputs_of(Task(TaskKind.REBUILD, "agg", 0, 0, first=1)) == []


# -- the tasks of a step ------------------------------------------------------------------


def test_step_tasks_in_topological_order() -> None:
    g = graph()
    tasks = g.step_tasks(7, {})
    assert [(t.stage, t.channel) for t in tasks] == [
        ("events", 0), ("events", 1), ("clean", 0), ("clean", 1),
        ("agg", 0), ("agg", 1), ("agg", 2), ("out", 0), ("out", 1), ("out", 2),
    ]
    assert all(t.step == 7 and t.first == 7 and not t.recovery and t.epoch == 0 for t in tasks)
    assert [t.kind for t in tasks] == [g.task_kind(t.stage) for t in tasks]


def test_step_tasks_attach_offsets_to_source_tasks() -> None:
    g = graph()
    offsets = {Channel("events", 0): (100, 150), Channel("events", 1): (90, 140)}
    tasks = g.step_tasks(3, offsets)
    got = {(t.stage, t.channel): t.ranges for t in tasks}
    assert got[("events", 0)] == ((0, 100, 150),)
    assert got[("events", 1)] == ((1, 90, 140),)
    assert all(t.ranges is None for t in tasks if t.kind is not TaskKind.SOURCE)


def test_a_channel_reads_every_slot_it_owns_in_slot_order() -> None:
    """Kafka partitions are slots: partition p is read by channel p mod parallelism (two channels here)."""
    g = graph()
    offsets = {Channel("events", 4): (7, 9), Channel("events", 2): (0, 3), Channel("events", 3): (5, 5)}
    tasks = {(t.stage, t.channel): t for t in g.step_tasks(1, offsets)}
    assert tasks[("events", 0)].ranges == ((2, 0, 3), (4, 7, 9))
    assert tasks[("events", 0)].source_rows == 5
    assert tasks[("events", 1)].ranges == ((3, 5, 5),)


def test_step_tasks_of_a_scrambled_pipeline() -> None:
    g = graph(SCRAMBLED)
    stages = [t.stage for t in g.step_tasks(1, {})]
    assert stages == ["dims", "raw", "raw", "left", "left", "join", "join", "out", "out"]


def test_direct_construction_with_a_cycle_is_refused() -> None:
    spec = graph().spec
    events = spec.stage("events")
    looped = replace(events, inputs=(Edge("clean", "events", Partition.FORWARD),))
    g = Graph(replace(spec, stages=(looped, *spec.stages[1:])))
    with pytest.raises(ValueError, match="cycle"):
        _ = g.order


JOINED = """
apiVersion: ftpipeline.io/v1alpha1
kind: FTPipeline
metadata: {name: j}
spec:
  entryPoint: m.py
  workers: 1
  stages:
    - {name: a, source: {file: {path: d, format: jsonl, rowsPerStep: 10, schema: {k: string, ts: long}},
       eventTime: {column: ts, watermark: {maxOutOfOrderness: 1s}}}}
    - {name: b, source: {file: {path: e, format: jsonl, rowsPerStep: 10, schema: {k: string, ts: long}},
       eventTime: {column: ts, watermark: {maxOutOfOrderness: 1s}}}}
    - {name: ab, inputs: [{stage: a}, {stage: b}], join: {keys: [k], within: {lower: -15m, upper: 10m}}}
    - {name: again, inputs: [{stage: ab}, {stage: b}], join: {keys: [k], timeColumn: left_ts,
       within: {lower: 0s, upper: 1m}}}
    - {name: out, inputs: [{stage: again}], sink: {parquet: {path: o}}}
"""


def test_each_interval_join_holds_the_watermark_it_passes_on_back_by_how_long_a_row_waits() -> None:
    """As Flink's interval join: by max(upper, -lower); over paths, the longest hold."""
    g = Graph(parse_pipeline(JOINED, Path("/tmp"), check_entry_point=False))
    minute = 60_000_000
    assert [g.held_back_us(s) for s in ("a", "b", "ab", "again", "out")] == [0, 0, 0, 15 * minute, 16 * minute]


def test_the_rows_kind_travels_only_where_an_event_time_operator_downstream_tells_it_apart() -> None:
    """``ab``'s rows reach the join ``again`` (an event-time operator): their kind matters; ``again``'s reach only
    a sink; a source's are all after the advance anyway, but its downstream join takes them."""
    g = Graph(parse_pipeline(JOINED, Path("/tmp"), check_entry_point=False))
    assert [g.orders_downstream(s) for s in ("a", "b", "ab", "again", "out")] == [True, True, True, False, False]
