"""What a pipeline's output and dead letters must be, computed as one plain PySpark batch job.

It shares with the runtime only the pipeline's *definition* — the user's
generator and transform functions — and none of the machinery under test: no
workers, objects, lineage, partitioning, Arrow state merging or barrier, and
not the file reader either (``files.py`` reads file sources on its own, and
``kafka.py`` topics). Each input row is tagged with the step that reads it,
deterministically from the spec (step k of channel c covers rows
``[(k-1)*share, k*share)``, clipped to a bounded input), or for a Kafka
source from the offsets the run recorded for each step, then:

- transforms run once over the whole input (they must keep the ``_step``
  column, which row-wise DataFrame code does);
- an aggregate becomes ``groupBy(keys, _step)`` followed by a running total
  over a window ordered by step: the rows of the keys touched in step k with
  their totals through k — the runtime's update-mode output, derived
  independently; with a TTL, a key's steps are cut into sessions wherever
  more than ttl steps separate two of them, and totals run per session;
  rows with a null key are its dead letters;
- an event-time window, or a deduplication, becomes the batch job
  ``windows.py`` (``dedup.py``) describes, with the watermark of each step
  the run recorded; a row an operator upstream emitted before its step's
  advance (a window fired, ...) carries ``_early`` and is judged against the
  watermark before (``eventtime/order.py``);
- a sink's expected rows are those of its input, per step.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ftpipeline.dataflow.graph import Graph
from ftpipeline.dataflow.plans import scannable
from ftpipeline.dataflow.sources import channel_share, make_reader, rows_per_step
from ftpipeline.eventtime.columns import END_OF_INPUT
from ftpipeline.oracle.files import STEP, Letter, read_file_stage
from ftpipeline.oracle.kafka import read_kafka_stage
from ftpipeline.oracle.dedup import deduplicated
from ftpipeline.oracle.joins import joined
from ftpipeline.oracle.lookup import looked_up
from ftpipeline.oracle.process import processed
from ftpipeline.oracle.sessions import sessionized
from ftpipeline.oracle.windows import EARLY, Marks, held_marks, windowed
from ftpipeline.control import history as step_history
from ftpipeline.lineage.stepclock import StepClock
from ftpipeline.spec.load import load_entry_module
from ftpipeline.objectstore.base import ObjectStore
from ftpipeline.spec.model import PipelineSpec, StageKind

LARGE_ROWS_BYTES = 64 * 1024 * 1024


def canonical(record: str) -> str:
    """A null-key row's record without its place: the same JSON object whatever the column order."""
    doc = json.loads(record)
    doc.pop(STEP, None)
    return json.dumps(doc, sort_keys=True, default=str)


@dataclass
class Expected:
    sinks: dict[str, Any]                             # sink -> DataFrame with a ``step`` column
    letters: list[Letter] = field(default_factory=list)
    late: dict[str, Any] = field(default_factory=dict)  # window stage -> its late rows, with a ``step`` column
    sources: dict[str, Any] = field(default_factory=dict)  # source stage -> its rows read (for the batch truth)
    clocks: dict[int, StepClock] = field(default_factory=dict)  # the run's, from its step history


def _generated_rows(spec: PipelineSpec, stage_name: str, module: Any, steps: int) -> pa.Table:
    stage = spec.stage(stage_name)
    reader = make_reader(stage, module)  # the user's generator defines the rows
    tables = []
    for ch in range(stage.parallelism):
        share = channel_share(rows_per_step(stage), stage.parallelism, ch)
        total = reader.available(ch, 0)
        for step in range(1, steps + 1):
            lo = (step - 1) * share
            hi = lo + share if total is None else min(lo + share, total)
            if hi <= lo:
                break
            t = reader.read(ch, step, lo, hi).table
            tables.append(t.append_column(STEP, pa.array([step] * t.num_rows, pa.int32())))
    return pa.concat_tables(tables, promote_options="permissive")


def expected(spark: Any, spec: PipelineSpec, steps: int, work: Path | None = None,
             history: ObjectStore | Path | None = None, batch_of: Expected | None = None) -> Expected:
    """The expected DataFrame of every sink and the expected dead letters of steps 1..``steps``.

    With ``work`` (a directory that outlives the frames' use), a source's rows
    larger than ``LARGE_ROWS_BYTES`` reach Spark as a Parquet file written there,
    not through ``createDataFrame``, which would hold them in Spark's driver. A Kafka
    source needs the run's step ``history`` (``oracle/kafka.py``). ``batch_of``: the
    batch truth (``truth.py``) of what that run's expectation read (its sources, its clocks, not read again):
    no watermark in any step but the last, which ends the input."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    module = load_entry_module(spec.entry_point, spec.base_dir)
    graph = Graph(spec)
    frames: dict[str, Any] = {}
    letters: list[Letter] = []
    late: dict[str, Any] = {}  # a window's expected late rows (oracle/windows.py)
    if batch_of is not None:
        clocks = batch_of.clocks
    else:
        clocks = step_history.clocks(history) if history is not None else {}
    marks = Marks({s: c.watermark for s, c in clocks.items() if s <= steps},
                  {s: c.before for s, c in clocks.items() if s <= steps})
    if batch_of is not None:  # nothing is late, nothing fires before the input's end, and then everything does
        marks = Marks({**{s: None for s in range(1, steps)}, steps: END_OF_INPUT},
                      {s: None for s in range(1, steps + 1)})
    times = {s: c.now for s, c in clocks.items()}
    versions = {s: dict(c.tables) for s, c in clocks.items()}
    base = marks
    for name in graph.order:
        stage = spec.stage(name)
        marks = held_marks(base, graph.held_back_us(name))  # the joins upstream hold this stage's watermark back
        if stage.kind is StageKind.SOURCE:
            if batch_of is not None:
                frames[name] = batch_of.sources[name]
                continue
            if stage.file is not None:
                rows, dead = read_file_stage(stage, steps)
                letters.extend(dead)
            elif stage.kafka is not None:
                if history is None:
                    raise ValueError(f"stage {name!r} reads Kafka: the oracle needs the run's step history")
                rows, dead = read_kafka_stage(stage, spec.kafka_bootstrap, steps, history)
                letters.extend(dead)
            else:
                rows = _generated_rows(spec, name, module, steps)
            frames[name] = _frame(spark, rows, name, work)
            continue
        if stage.join is not None:
            frames[name], late[name] = joined(spark, frames[stage.inputs[0].upstream],
                                              frames[stage.inputs[1].upstream], stage, marks, letters)
            continue
        df = frames[stage.inputs[0].upstream]
        for edge in stage.inputs[1:]:
            df = df.unionByName(frames[edge.upstream], allowMissingColumns=True)
        if stage.kind is StageKind.TRANSFORM:
            assert stage.function is not None
            df = getattr(module, stage.function)(df)
            if STEP not in df.columns:
                raise ValueError(f"stage {name!r}: {stage.function}() dropped the {STEP} column; "
                                 "the oracle needs row-wise transforms that keep unknown columns")
        elif stage.lookup is not None:  # each step's rows to the table at the version it recorded
            df = looked_up(spark, df, stage, {s: v for s, v in versions.items() if s <= steps}, spec.kafka_bootstrap)
        elif stage.process is not None:  # the user's class over each key's rows, in plain Python
            df = spark.createDataFrame(processed(module, df.toArrow(), stage, marks, times, steps, letters))
        elif stage.deduplicate is not None:
            df, late[name] = deduplicated(spark, df, stage, marks, letters)
        elif stage.aggregate is not None and stage.aggregate.window is not None:
            oracle = sessionized if stage.aggregate.window.kind == "session" else windowed
            df, late[name] = oracle(spark, df, stage, marks, letters)
        elif stage.kind is StageKind.AGGREGATE:
            op = stage.aggregate
            assert op is not None
            keys = list(op.key_by)
            null_key = F.lit(False)
            for k in keys:
                null_key = null_key | F.col(k).isNull()
            for row in df.filter(null_key).toArrow().to_pylist():
                record = json.dumps(row, default=str)
                letters.append(Letter(name, int(row[STEP]), name, canonical(record)))
            df = df.filter(~null_key)
            partial = df.groupBy(*keys, STEP).agg(*[
                (F.count(F.lit(1)) if a.op == "count" else getattr(F, a.op)(F.col(str(a.column)))).alias(a.name)
                for a in op.aggregations
            ])
            group = list(keys)
            if op.ttl_steps:  # a key idle for more than ttl steps starts new totals: number its sessions
                ordered = Window.partitionBy(*keys).orderBy(STEP)
                previous = F.lag(STEP).over(ordered)
                partial = partial.withColumn("_fresh", (previous.isNull() | (F.col(STEP) - previous > op.ttl_steps))
                                             .cast("int"))
                partial = partial.withColumn("_session", F.sum("_fresh").over(
                    ordered.rowsBetween(Window.unboundedPreceding, Window.currentRow)))
                group.append("_session")
            running = Window.partitionBy(*group).orderBy(STEP).rowsBetween(Window.unboundedPreceding, Window.currentRow)
            merge = {"count": F.sum, "sum": F.sum, "min": F.min, "max": F.max}
            df = partial.select(*keys, STEP, *[merge[a.op](F.col(a.name)).over(running).alias(a.name) for a in op.aggregations])
        frames[name] = df
    return Expected({s.name: _union_inputs(frames, s) for s in graph.sinks()}, letters,
                    {n: df.withColumnRenamed(STEP, "step") for n, df in late.items()},
                    {s.name: frames[s.name] for s in graph.sources()}, dict(clocks))


def expected_outputs(spark: Any, spec: PipelineSpec, steps: int) -> dict[str, Any]:
    """Expected DataFrame of every sink, with a ``step`` column."""
    return expected(spark, spec, steps).sinks


def _frame(spark: Any, rows: pa.Table, name: str, work: Path | None) -> Any:
    if work is None or rows.nbytes <= LARGE_ROWS_BYTES or not scannable(rows.schema):
        return spark.createDataFrame(rows)
    path = work / f"{name}-source.parquet"
    pq.write_table(rows, path)
    return spark.read.parquet(str(path))


def _union_inputs(frames: dict[str, Any], sink: Any) -> Any:
    df = frames[sink.inputs[0].upstream]
    for edge in sink.inputs[1:]:
        df = df.unionByName(frames[edge.upstream], allowMissingColumns=True)
    return (df.drop(EARLY) if EARLY in df.columns else df).withColumnRenamed(STEP, "step")
