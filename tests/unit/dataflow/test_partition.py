"""Splitting a task's output into objects: the routing columns decide, and never reach an object."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from ftpipeline.dataflow.graph import Graph
from ftpipeline.dataflow.partition import hashing, split, wanted
from ftpipeline.lineage.naming import ObjectName, Task, TaskKind
from ftpipeline.spec.load import parse_pipeline

PIPELINE = """
apiVersion: ftpipeline.io/v1alpha1
kind: FTPipeline
metadata: {name: p}
spec:
  image: x
  entryPoint: m.py
  workers: 2
  stages:
    - {name: src, parallelism: 2, source: {generator: {function: gen, rowsPerStep: 10}}}
    - {name: agg, parallelism: 3, inputs: [{stage: src}],
       aggregate: {keyBy: [k], aggregations: [{name: n, op: count}]}}
    - {name: copy, parallelism: 2, inputs: [{stage: src}], transform: {function: f}}
    - {name: out, parallelism: 3, inputs: [{stage: agg}], sink: {parquet: {path: o}}}
    - {name: out2, parallelism: 2, inputs: [{stage: copy}], sink: {parquet: {path: o2}}}
"""


def graph() -> Graph:
    return Graph.physical(parse_pipeline(PIPELINE, Path("/tmp"), check_entry_point=False))


def test_rows_go_where_their_routing_column_says_and_the_column_is_dropped() -> None:
    g = graph()
    task = Task(TaskKind.SOURCE, "src", 1, 4)
    table = pa.table({"k": ["a", "b", "c", "d"], "__ftp_part_0": [0, 2, 2, 1]})
    out = split(g, task, table)
    by_target = {ObjectName.parse(name): t for name, t in out.items()}
    hashed = {o.target_channel: t.column("k").to_pylist() for o, t in by_target.items() if o.target == "agg"}
    assert hashed == {0: ["a"], 1: ["d"], 2: ["b", "c"]}
    [forward] = [(o, t) for o, t in by_target.items() if o.target == "copy"]
    assert forward[0].target_channel == 1 and forward[1].column("k").to_pylist() == ["a", "b", "c", "d"]
    assert all(t.schema.names == ["k"] for t in out.values())


def test_a_recovery_rerun_emits_only_the_objects_it_is_asked_for() -> None:
    g = graph()
    name = ObjectName("src", 0, 2, "agg", 1, 2).key()
    task = Task(TaskKind.SOURCE, "src", 0, 2, emit=frozenset({name}))
    assert wanted(g, task) == {name}
    out = split(g, task, pa.table({"k": ["x", "y"], "__ftp_part_0": [2, 0]}))
    assert list(out) == [name] and out[name].column("k").to_pylist() == ["x"]
    assert split(g, Task(TaskKind.SOURCE, "src", 0, 2, emit=frozenset()), pa.table({"k": ["x"]})) == {}


def test_only_a_stage_with_a_hash_edge_gets_a_routing_step() -> None:
    g = graph()
    assert hashing(g, "src") is not None
    assert hashing(g, "agg") is None  # agg -> out is forward (a chain)
