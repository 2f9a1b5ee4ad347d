"""Operator chaining: which stages share a task, and the physical graph the runtime plans on."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from ftpipeline.dataflow.chains import chains, physical
from ftpipeline.dataflow.graph import Graph
from ftpipeline.lineage.naming import ObjectName, Task, TaskKind
from ftpipeline.spec.load import parse_pipeline
from ftpipeline.spec.model import PipelineSpec

HEAD = """
apiVersion: ftpipeline.io/v1alpha1
kind: FTPipeline
metadata: {name: c}
spec:
  image: x
  entryPoint: m.py
  workers: 2
  stages:
"""


def spec(*stages: str) -> PipelineSpec:
    return parse_pipeline(HEAD + "".join(f"    - {s}\n" for s in stages), Path("/tmp"), check_entry_point=False)


SRC = "{name: src, parallelism: 2, source: {generator: {function: gen, rowsPerStep: 10}}}"
AGG = "aggregate: {keyBy: [k], aggregations: [{name: n, op: count}]}"


def test_clickstream_shape_makes_two_chains_split_at_the_hash_edge() -> None:
    s = spec(SRC,
             "{name: clean, parallelism: 2, inputs: [{stage: src}], transform: {function: f}}",
             "{name: agg, parallelism: 2, inputs: [{stage: clean}], " + AGG + "}",
             "{name: out, parallelism: 2, inputs: [{stage: agg}], sink: {parquet: {path: o}}}")
    assert chains(s) == [("src", "clean"), ("agg", "out")]


def test_a_straight_line_of_transforms_is_one_chain_ending_in_its_sink() -> None:
    s = spec(SRC,
             "{name: a, parallelism: 2, inputs: [{stage: src}], transform: {function: f}}",
             "{name: b, parallelism: 2, inputs: [{stage: a}], transform: {function: f}}",
             "{name: out, parallelism: 2, inputs: [{stage: b}], sink: {parquet: {path: o}}}")
    assert chains(s) == [("src", "a", "b", "out")]
    assert chains(replace(s, chaining=False)) == [("src",), ("a",), ("b",), ("out",)]


def test_fan_out_fan_in_forward_aggregate_and_parallelism_change_break_chains() -> None:
    s = spec(SRC,
             "{name: enrich, parallelism: 2, inputs: [{stage: src}], transform: {function: f}}",
             # enrich has two outputs: neither continues its chain
             "{name: side, parallelism: 2, inputs: [{stage: enrich}], transform: {function: f}}",
             "{name: fwd-agg, parallelism: 2, inputs: [{stage: enrich, partition: forward}], " + AGG + "}",
             # a second source joined in: two inputs
             "{name: dims, parallelism: 2, source: {generator: {function: gen, rowsPerStep: 10}}}",
             "{name: join, parallelism: 2, inputs: [{stage: side}, {stage: dims}], transform: {function: f}}",
             "{name: wide, parallelism: 3, inputs: [{stage: join, partition: hash, keys: [k]}], transform: {function: f}}",
             "{name: out, parallelism: 3, inputs: [{stage: wide}], sink: {parquet: {path: o}}}",
             "{name: out2, parallelism: 2, inputs: [{stage: fwd-agg}], sink: {parquet: {path: p}}}")
    assert chains(s) == [("src", "enrich"), ("side",), ("fwd-agg", "out2"), ("dims",), ("join",), ("wide", "out")]


def test_physical_graph_joins_chain_heads_and_keeps_every_sink() -> None:
    s = spec(SRC,
             "{name: clean, parallelism: 2, inputs: [{stage: src}], transform: {function: f}}",
             "{name: agg, parallelism: 2, inputs: [{stage: clean}], " + AGG + "}",
             "{name: out, parallelism: 2, inputs: [{stage: agg}], sink: {parquet: {path: o}}}")
    p = physical(s)
    assert [st.name for st in p.stages] == ["src", "agg"]
    assert [m.name for m in p.stages[0].members] == ["src", "clean"]
    assert physical(p) is p
    g = Graph.physical(s)
    assert g.order == ("src", "agg")
    assert [x.name for x in g.sinks()] == ["out"] == [x.name for x in Graph(s).sinks()]
    assert not g.is_stateful("src") and g.is_stateful("agg")
    # the chain's output is named after the chain: lineage is kept at its boundary
    src = Task(TaskKind.SOURCE, "src", 0, 4, ranges=((0, 0, 5),))
    assert g.outputs_of(src) == [ObjectName("src", 0, 4, "agg", 1, t) for t in range(2)]
    assert g.outputs_of(Task(TaskKind.AGGREGATE, "agg", 1, 4)) == []
    assert g.inputs_of(Task(TaskKind.AGGREGATE, "agg", 1, 4)) == [ObjectName("src", u, 4, "agg", 1, 1) for u in range(2)]
    assert len(g.step_tasks(4, {})) == 4  # 8 stages' tasks without chaining
    assert len(Graph(s).step_tasks(4, {})) == 8
