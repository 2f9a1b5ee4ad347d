"""The pipeline's physical dataflow as plain values: what the report draws as its graph.

Why: the runtime runs the *physical* graph (``Graph.physical``: a chain of
one-to-one stages is one stage, one task per channel), so a recovery moves
physical channels between workers. The report shows that graph, not the
stages as written: stages as columns in topological order, one node per
channel with the worker running it, and the channel-to-channel links each
edge makes (forward: channel i to channel i; hash and broadcast: every
channel to every channel).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ftpipeline.dataflow.graph import Graph
from ftpipeline.lineage.naming import Channel, WorkerId

__all__ = ["static_graph"]


def static_graph(graph: Graph, placement: Mapping[Channel, WorkerId],
                 initial: Mapping[Channel, WorkerId] | None = None) -> dict[str, Any]:
    """Stages, channels (with their worker now and at the start) and links of ``graph`` as JSON values."""
    initial = initial or {}
    stages = []
    channels = []
    for column, name in enumerate(graph.order):
        stage = graph.stage(name)
        stages.append({"name": name, "column": column, "kind": stage.kind.value, "parallelism": stage.parallelism,
                       "members": [m.name for m in stage.members], "stateful": graph.is_stateful(name)})
        for index in range(stage.parallelism):
            ch = Channel(name, index)
            worker, first = placement.get(ch), initial.get(ch)
            channels.append({"key": ch.key(), "stage": name, "index": index, "column": column,
                             "worker": worker, "initial_worker": first if first is not None else worker})
    edges = []
    links = []
    for name in graph.order:
        for edge in graph.downstream(name):
            edges.append({"upstream": edge.upstream, "downstream": edge.downstream,
                          "partition": edge.partition.value, "keys": list(edge.keys)})
            for index in range(graph.stage(name).parallelism):
                for target in graph.targets(edge, index):
                    links.append({"from": Channel(name, index).key(), "to": Channel(edge.downstream, target).key(),
                                  "partition": edge.partition.value})
    return {"stages": stages, "channels": channels, "edges": edges, "links": links}
