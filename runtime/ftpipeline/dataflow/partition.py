"""Splitting one task's output into objects, one per downstream channel.

Hash partitioning is Spark's own ``hash`` (Murmur3, fixed seed), so the
split is deterministic across processes and runs — Python's ``hash`` is
salted per process and would send a replayed row to a different channel
than the original. It is computed over the task's Arrow output in numpy
(``dataflow/murmur3.py``), with no Spark job: a task that runs no user
function (a source, an aggregate) needs no Spark at all. Key columns of a
type that module does not hash (decimals, binary, nested) are hashed by
Spark, the same function, in a job of their own. Re-partitioning state on
a rescale (``worker/rekey.py``) uses the same :func:`channels_of`.
Forward and broadcast edges need no hashing.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ftpipeline.dataflow import murmur3
from ftpipeline.dataflow.frames import to_dataframe
from ftpipeline.dataflow.graph import Graph
from ftpipeline.lineage.naming import ObjectName, Task
from ftpipeline.spec.model import Partition

_ROW = "__ftp_row"


def wanted(graph: Graph, task: Task) -> set[str]:
    """Names of the objects ``task`` emits: its outputs, less those a recovery re-run leaves out."""
    names = {o.key() for o in graph.outputs_of(task)}
    return names if task.emit is None else names & task.emit


def channels_of(spark: Any, table: pa.Table, keys: tuple[str, ...] | list[str], parallelism: int) -> pa.Array:
    """The channel (of ``parallelism``) each row of ``table`` belongs to, in row order:
    ``pmod(hash(*keys), parallelism)``, in numpy where the key types allow, else by Spark."""
    routed = murmur3.channels(table, keys, parallelism)
    if routed is not None:
        return routed
    from pyspark.sql import functions as F

    numbered = table.select(list(keys)).append_column(_ROW, pa.array(range(table.num_rows), pa.int64()))
    out = to_dataframe(spark, numbered).select(
        F.col(_ROW), F.pmod(F.hash(*[F.col(k) for k in keys]), F.lit(parallelism)).alias("c")).toArrow()
    return pc.take(out["c"], pc.sort_indices(out[_ROW])).combine_chunks()


def split(graph: Graph, task: Task, table: pa.Table, spark: Any = None) -> dict[str, pa.Table]:
    """Objects of ``task``'s output: ``{object name: table}`` for the names it may emit (``spark``:
    for keys of a type only Spark hashes)."""
    names = wanted(graph, task)
    if not names:
        return {}
    out: dict[str, pa.Table] = {}
    for edge in graph.downstream(task.stage):
        pf = edge.partition.number
        routed = None
        for tc in graph.targets(edge, task.channel):
            name = ObjectName(task.stage, task.channel, task.step, edge.downstream, pf, tc).key()
            if name not in names:
                continue
            if edge.partition is Partition.HASH:
                if routed is None:
                    routed = channels_of(spark, table, edge.keys, graph.stage(edge.downstream).parallelism)
                out[name] = table.filter(pc.equal(routed, tc))
            else:
                out[name] = table
    return out
