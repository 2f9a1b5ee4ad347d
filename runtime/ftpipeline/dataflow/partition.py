"""Splitting one task's output into objects, one per downstream channel.

Hash partitioning uses Spark's own ``hash`` (Murmur3, fixed seed) in the same
Spark job as the stage's function, so the split is deterministic across
processes and runs — Python's ``hash`` is salted per process and would send
a replayed row to a different channel than the original. Forward and
broadcast edges need no Spark at all.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ftpipeline.dataflow.frames import to_dataframe
from ftpipeline.dataflow.graph import Graph
from ftpipeline.lineage.naming import ObjectName, Task
from ftpipeline.spec.model import Partition

_PART = "__ftp_part_{}"


def _is_dataframe(data: Any) -> bool:
    return not isinstance(data, pa.Table)


def split(graph: Graph, task: Task, data: Any, spark: Any) -> dict[str, pa.Table]:
    """Objects of ``task``'s output: ``{object name: table}`` for the names it may emit.

    ``data`` is a Spark DataFrame or a pyarrow Table.
    """
    edges = graph.downstream(task.stage)
    wanted = {o.key() for o in graph.outputs_of(task)}
    if task.emit is not None:
        wanted &= task.emit
    if not wanted:
        return {}
    hashed = [(i, e) for i, e in enumerate(edges) if e.partition is Partition.HASH]
    if hashed:
        from pyspark.sql import functions as F

        df = data if _is_dataframe(data) else to_dataframe(spark, data)
        for i, edge in hashed:
            parallelism = graph.stage(edge.downstream).parallelism
            df = df.withColumn(_PART.format(i), F.pmod(F.hash(*[F.col(k) for k in edge.keys]), F.lit(parallelism)))
        table = df.toArrow()
    else:
        table = data.toArrow() if _is_dataframe(data) else data
    helpers = [_PART.format(i) for i, _ in hashed]
    payload = table.drop_columns(helpers) if helpers else table
    out: dict[str, pa.Table] = {}
    for i, edge in enumerate(edges):
        pf = edge.partition.number
        for tc in graph.targets(edge, task.channel):
            name = ObjectName(task.stage, task.channel, task.step, edge.downstream, pf, tc).key()
            if name not in wanted:
                continue
            if edge.partition is Partition.HASH:
                mask = pc.equal(table.column(_PART.format(i)), tc)
                out[name] = payload.filter(mask)
            else:
                out[name] = payload
    return out
