"""The oracle: what a pipeline's output must be, computed as one plain PySpark batch job.

It shares with the runtime only the pipeline's *definition* — the source
readers that define the input rows, the user's transform functions — and
none of the machinery under test: no workers, objects, lineage, partitioning,
Arrow state merging or barrier. Each input row is tagged with the step that
reads it, deterministically from the spec (step k of channel c covers rows
``[(k-1)*share, k*share)``, clipped to a bounded input), then:

- transforms run once over the whole input (they must keep the ``_step``
  column, which row-wise DataFrame code does);
- an aggregate becomes ``groupBy(keys, _step)`` followed by a running total
  over a window ordered by step: the rows of the keys touched in step k with
  their totals through k — the runtime's update-mode output, derived
  independently;
- a sink's expected rows are those of its input, per step.

:func:`compare` then checks the actual output row for row (as multisets,
so a duplicated row is an error) against the expected rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from ftpipeline.dataflow.graph import Graph
from ftpipeline.dataflow.sources import channel_share, make_reader, rows_per_step
from ftpipeline.spec.load import load_entry_module
from ftpipeline.spec.model import PipelineSpec, StageKind

STEP = "_step"


def _source_rows(spec: PipelineSpec, stage_name: str, module: Any, steps: int) -> pa.Table:
    stage = spec.stage(stage_name)
    reader = make_reader(stage, module)
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


def expected_outputs(spark: Any, spec: PipelineSpec, steps: int) -> dict[str, Any]:
    """Expected DataFrame of every sink, with a ``step`` column."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    module = load_entry_module(spec.entry_point, spec.base_dir)
    graph = Graph(spec)
    frames: dict[str, Any] = {}
    for name in graph.order:
        stage = spec.stage(name)
        if stage.kind is StageKind.SOURCE:
            frames[name] = spark.createDataFrame(_source_rows(spec, name, module, steps))
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
        elif stage.kind is StageKind.AGGREGATE:
            op = stage.aggregate
            assert op is not None
            keys = list(op.key_by)
            for k in keys:
                df = df.filter(F.col(k).isNotNull())
            partial = df.groupBy(*keys, STEP).agg(*[
                (F.count(F.lit(1)) if a.op == "count" else getattr(F, a.op)(F.col(str(a.column)))).alias(a.name)
                for a in op.aggregations
            ])
            running = Window.partitionBy(*keys).orderBy(STEP).rowsBetween(Window.unboundedPreceding, Window.currentRow)
            merge = {"count": F.sum, "sum": F.sum, "min": F.min, "max": F.max}
            df = partial.select(*keys, STEP, *[merge[a.op](F.col(a.name)).over(running).alias(a.name) for a in op.aggregations])
        frames[name] = df
    return {s.name: _union_inputs(frames, s) for s in graph.sinks()}


def _union_inputs(frames: dict[str, Any], sink: Any) -> Any:
    df = frames[sink.inputs[0].upstream]
    for edge in sink.inputs[1:]:
        df = df.unionByName(frames[edge.upstream], allowMissingColumns=True)
    return df.withColumnRenamed(STEP, "step")


@dataclass(frozen=True)
class Comparison:
    sink: str
    expected_rows: int
    actual_rows: int
    missing: int
    extra: int
    duplicates: int

    @property
    def equal(self) -> bool:
        return self.missing == 0 and self.extra == 0 and self.expected_rows == self.actual_rows

    def __str__(self) -> str:
        verdict = "equals the oracle" if self.equal else "DIFFERS from the oracle"
        return (f"{self.sink}: output {verdict}: {self.actual_rows} rows (expected {self.expected_rows}), "
                f"{self.missing} missing, {self.extra} extra, {self.duplicates} duplicated")


def compare(spark: Any, spec: PipelineSpec, steps: int) -> list[Comparison]:
    """Compare every sink's released output for steps 1..``steps`` with the oracle."""
    from pyspark.sql import functions as F

    out = []
    for name, expected in expected_outputs(spark, spec, steps).items():
        sink = spec.stage(name).sink
        assert sink is not None
        actual = spark.read.parquet(str(sink.path)).filter(F.col("step") <= steps)
        cols = expected.columns
        types = dict(expected.dtypes)
        actual = actual.select(*[F.col(c).cast(types[c]) for c in cols])
        expected, actual = expected.cache(), actual.cache()
        dup = actual.groupBy(*cols).count().filter(F.col("count") > 1)
        out.append(Comparison(
            sink=name,
            expected_rows=expected.count(),
            actual_rows=actual.count(),
            missing=expected.exceptAll(actual).count(),
            extra=actual.exceptAll(expected).count(),
            duplicates=int(dup.agg(F.sum(F.col("count") - 1)).first()[0] or 0),
        ))
        expected.unpersist()
        actual.unpersist()
    return out
