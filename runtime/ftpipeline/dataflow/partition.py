"""Splitting one task's output into objects, one per downstream channel.

Hash partitioning uses Spark's own ``hash`` (Murmur3, fixed seed), computed
in the same Spark job as the chain's functions (``hashing`` is the last step
of the chain's program), so the split is deterministic across
processes and runs — Python's ``hash`` is salted per process and would send
a replayed row to a different channel than the original. Forward and
broadcast edges need no Spark at all.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ftpipeline.dataflow.graph import Graph
from ftpipeline.lineage.naming import ObjectName, Task
from ftpipeline.spec.model import Partition

_PART = "__ftp_part_{}"


def wanted(graph: Graph, task: Task) -> set[str]:
    """Names of the objects ``task`` emits: its outputs, less those a recovery re-run leaves out."""
    names = {o.key() for o in graph.outputs_of(task)}
    return names if task.emit is None else names & task.emit


def hashing(graph: Graph, stage: str) -> Callable[[Any], Any] | None:
    """A DataFrame -> DataFrame step adding, per hash edge out of ``stage``, the column of each row's
    target channel (Spark's Murmur3 ``hash``); None when no edge hashes. It runs inside the
    chain's program (``dataflow/plans.py``), so Spark computes it in the same job."""
    edges = graph.downstream(stage)
    hashed = [(i, e, graph.stage(e.downstream).parallelism) for i, e in enumerate(edges)
              if e.partition is Partition.HASH]
    if not hashed:
        return None

    def add(df: Any) -> Any:
        from pyspark.sql import functions as F

        for i, edge, parallelism in hashed:
            df = df.withColumn(_PART.format(i), F.pmod(F.hash(*[F.col(k) for k in edge.keys]), F.lit(parallelism)))
        return df
    return add


def split(graph: Graph, task: Task, table: pa.Table) -> dict[str, pa.Table]:
    """Objects of ``task``'s output: ``{object name: table}`` for the names it may emit.

    ``table`` carries the columns ``hashing`` adds when an edge hashes; they route rows and are dropped.
    """
    edges = graph.downstream(task.stage)
    names = wanted(graph, task)
    if not names:
        return {}
    hashed = [i for i, e in enumerate(edges) if e.partition is Partition.HASH]
    helpers = [_PART.format(i) for i in hashed]
    payload = table.drop_columns(helpers) if helpers else table
    out: dict[str, pa.Table] = {}
    for i, edge in enumerate(edges):
        pf = edge.partition.number
        for tc in graph.targets(edge, task.channel):
            name = ObjectName(task.stage, task.channel, task.step, edge.downstream, pf, tc).key()
            if name not in names:
                continue
            if edge.partition is Partition.HASH:
                out[name] = payload.filter(pc.equal(table.column(_PART.format(i)), tc))
            else:
                out[name] = payload
    return out
