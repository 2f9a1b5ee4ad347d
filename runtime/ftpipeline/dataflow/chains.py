"""Operator chaining: neighbouring stages joined one-to-one run as one task.

Why: a task has a fixed cost whatever its size — its hand-out through the
sidecar, its lineage bookkeeping in Redis, an Arrow object written and read
per edge, and a Spark job. A stage that takes every row of exactly one
upstream channel gains nothing from being a task of its own. Flink chains
such operators into one thread; here they become one task that applies the
stages' functions to one DataFrame, so Spark plans and runs them as one job.

Rule: the edge ``A -> B`` is chained when

- it is a forward edge (equal parallelism: channel i feeds channel i),
- it is A's only downstream edge and B's only input,
- B is a transform or a sink. An aggregate always starts a chain, so a
  chain keeps at most one state, keyed by the chain's name (the
  aggregate's), and a rebuild of that state only folds the chain's inputs;
- the pipeline has not switched chaining off (``spec.chaining: false``).

The *physical* pipeline has one stage per chain, named after its head and
carrying the rest of the chain in ``StageSpec.chain``; its edges join
chain heads. Everything that plans, records or recovers work (the lineage
tables, the planner, checkpoints, placement) works on the physical pipeline,
so lineage is kept at chain boundaries and a lost chain task is re-run whole.
What users see keeps its names: sources and aggregates head their chains,
sinks stage their output under their own name from inside the chain.
"""

from __future__ import annotations

from dataclasses import replace

from ftpipeline.spec.model import Edge, Partition, PipelineSpec, StageKind, StageSpec

_MEMBER_KINDS = (StageKind.TRANSFORM, StageKind.SINK)


def chains(spec: PipelineSpec) -> list[tuple[str, ...]]:
    """The chains of ``spec`` in declaration order of their heads, each as its stages' names."""
    by_name = {s.name: s for s in spec.stages}
    down: dict[str, list[Edge]] = {s.name: [] for s in spec.stages}
    for stage in spec.stages:
        for edge in stage.inputs:
            down[edge.upstream].append(edge)

    def joined(edge: Edge) -> bool:
        return (spec.chaining and edge.partition is Partition.FORWARD
                and len(down[edge.upstream]) == 1 and len(by_name[edge.downstream].inputs) == 1
                and by_name[edge.downstream].kind in _MEMBER_KINDS)

    out = []
    for stage in spec.stages:
        if len(stage.inputs) == 1 and joined(stage.inputs[0]):
            continue  # a member of its upstream's chain
        names = [stage.name]
        while len(down[names[-1]]) == 1 and joined(down[names[-1]][0]):
            names.append(down[names[-1]][0].downstream)
        out.append(tuple(names))
    return out


def physical(spec: PipelineSpec) -> PipelineSpec:
    """``spec`` with each chain as one stage (its head, carrying the others in ``chain``)."""
    if any(s.chain for s in spec.stages):
        return spec  # already physical
    by_name = {s.name: s for s in spec.stages}
    found = chains(spec)
    head_of = {name: chain[0] for chain in found for name in chain}
    stages: list[StageSpec] = []
    for chain in found:
        head = by_name[chain[0]]
        inputs = tuple(replace(e, upstream=head_of[e.upstream]) for e in head.inputs)
        stages.append(replace(head, inputs=inputs, chain=tuple(by_name[n] for n in chain[1:])))
    return replace(spec, stages=tuple(stages))
