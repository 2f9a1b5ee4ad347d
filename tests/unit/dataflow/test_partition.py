"""Splitting a task's output into objects: Spark's ``hash`` of the edge's keys decides, computed without Spark."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from ftpipeline.dataflow.graph import Graph
from ftpipeline.dataflow import murmur3
from ftpipeline.dataflow.partition import split, wanted
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


def test_known_spark_hash_values() -> None:
    """Values Spark's ``SELECT hash(...)`` gives (the integration test compares many more with Spark itself)."""
    ints = murmur3.spark_hash(pa.table({"n": pa.array([0, 1, -1], pa.int32())}), ["n"])
    longs = murmur3.spark_hash(pa.table({"n": pa.array([0, 1, -1], pa.int64())}), ["n"])
    words = murmur3.spark_hash(pa.table({"k": ["a", "b", "c", "d"]}), ["k"])
    assert ints is not None and ints.tolist() == [933211791, -559580957, -1604776387]
    assert longs is not None and longs.tolist() == [-1670924195, -1712319331, -939490007]
    assert words is not None and words.tolist() == [1485273170, 1905031361, -2124386278, -295670906]


def test_rows_go_to_pmod_of_their_hash_and_forward_edges_take_everything() -> None:
    g = graph()
    task = Task(TaskKind.SOURCE, "src", 1, 4)
    table = pa.table({"k": ["a", "b", "c", "d", "x", "y"]})  # pmod(hash(k), 3): 2, 2, 2, 1, 2, 0
    out = split(g, task, table)
    by_target = {ObjectName.parse(name): t for name, t in out.items()}
    hashed = {o.target_channel: t.column("k").to_pylist() for o, t in by_target.items() if o.target == "agg"}
    assert hashed == {0: ["y"], 1: ["d"], 2: ["a", "b", "c", "x"]}
    [forward] = [(o, t) for o, t in by_target.items() if o.target == "copy"]
    assert forward[0].target_channel == 1 and forward[1].column("k").to_pylist() == ["a", "b", "c", "d", "x", "y"]
    assert all(t.schema.names == ["k"] for t in out.values())


def test_a_recovery_rerun_emits_only_the_objects_it_is_asked_for() -> None:
    g = graph()
    name = ObjectName("src", 0, 2, "agg", 1, 2).key()
    task = Task(TaskKind.SOURCE, "src", 0, 2, emit=frozenset({name}))
    assert wanted(g, task) == {name}
    out = split(g, task, pa.table({"k": ["a", "y"]}))
    assert list(out) == [name] and out[name].column("k").to_pylist() == ["a"]
    assert split(g, Task(TaskKind.SOURCE, "src", 0, 2, emit=frozenset()), pa.table({"k": ["x"]})) == {}
