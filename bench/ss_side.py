"""The Spark Structured Streaming side of ``bench/vs_spark.py``: an FTPipeline file run as SS queries.

The pipeline's own document is translated, so both sides run the same dataflow with the same
user functions (imported from its entry point, as ftpipeline's workers do): the file source
becomes a streaming file source with the same explicit schema and ``maxFilesPerTrigger`` = its
parallelism (one step's files per micro-batch); malformed JSON Lines records, ftpipeline's dead
letters, are dropped (``mode=DROPMALFORMED``); a transform is its function applied to the
streaming DataFrame, after a ``repartition`` on the keys of a hash-partitioned input edge (the
same shuffle ftpipeline makes there); an aggregate is the same ``groupBy`` ftpipeline runs per step
(``dataflow.aggregate.partial``) over the stream, null keys dropped as ftpipeline sends them to dead
letters. A query has one sink, so each sink is its own query (``update`` output mode below an
aggregate, else ``append``), written by ``foreachBatch`` as Parquet to ``WORK/out/<sink>/batch=N``
with its checkpoint in ``WORK/checkpoints/<sink>``.

    python bench/ss_side.py PIPELINE.yaml --work DIR [--result FILE] [--cores 2] [--conf KEY=VALUE ...]

Runs until every input file is processed (``processAllAvailable``), then writes each query's
progress reports to FILE. Started again with the same ``--work`` it resumes from its checkpoints.
"""

from __future__ import annotations

import argparse
import json
from functools import reduce
from pathlib import Path
from types import ModuleType
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

from ftpipeline.dataflow import aggregate as agg
from ftpipeline.spec.load import load_entry_module, load_pipeline
from ftpipeline.spec.model import Partition, PipelineSpec, StageKind, StageSpec
from ftpipeline.worker.session import build_session

SQL_TYPES = {"string": "STRING", "long": "BIGINT", "double": "DOUBLE", "boolean": "BOOLEAN"}


def source(spark: SparkSession, stage: StageSpec) -> DataFrame:
    f = stage.file
    if f is None:
        raise ValueError(f"stage {stage.name!r}: only file sources have a Spark counterpart here")
    schema = ", ".join(f"`{name}` {SQL_TYPES[kind]}" for name, kind in f.schema)
    reader = spark.readStream.schema(schema).option("maxFilesPerTrigger", stage.parallelism)
    if f.format == "jsonl":
        return reader.option("mode", "DROPMALFORMED").json(str(f.path))
    if f.format == "csv":
        return reader.option("header", True).option("mode", "DROPMALFORMED").csv(str(f.path))
    return reader.parquet(str(f.path))


class Translation:
    """Every stage's streaming DataFrame, and whether a running aggregate is upstream of it."""

    def __init__(self, spark: SparkSession, spec: PipelineSpec, module: ModuleType) -> None:
        self.spark, self.spec, self.module = spark, spec, module
        self.frames: dict[str, tuple[DataFrame, bool]] = {}

    def frame(self, name: str) -> tuple[DataFrame, bool]:
        if name not in self.frames:
            self.frames[name] = self._build(self.spec.stage(name))
        return self.frames[name]

    def _build(self, stage: StageSpec) -> tuple[DataFrame, bool]:
        if stage.kind is StageKind.SOURCE:
            return source(self.spark, stage), False
        ups = [self.frame(edge.upstream) for edge in stage.inputs]
        df = reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True), [u[0] for u in ups])
        stateful = any(u[1] for u in ups)
        hashed = [e for e in stage.inputs if e.partition is Partition.HASH]
        if hashed and stage.kind is not StageKind.AGGREGATE:  # the same shuffle (an aggregate makes its own)
            df = df.repartition(stage.parallelism, *hashed[0].keys)
        if stage.kind is StageKind.TRANSFORM:
            assert stage.function is not None
            out: DataFrame = getattr(self.module, stage.function)(df)
            return out, stateful
        if stage.kind is StageKind.AGGREGATE:
            assert stage.aggregate is not None
            keyed = df.filter(~agg.null_key_filter(stage.aggregate))
            return agg.partial(keyed, stage.aggregate).drop(agg.ROWS), True
        return df, stateful


def start(name: str, df: DataFrame, stateful: bool, work: Path) -> StreamingQuery:
    target = work / "out" / name

    def write(batch: DataFrame, batch_id: int) -> None:
        batch.write.mode("overwrite").parquet(str(target / f"batch={batch_id}"))  # a re-run batch rewrites its own

    return (df.writeStream.queryName(name).outputMode("update" if stateful else "append")
            .option("checkpointLocation", str(work / "checkpoints" / name)).foreachBatch(write).start())


def progress(query: StreamingQuery) -> list[dict[str, Any]]:
    return [json.loads(p.json) for p in query.recentProgress]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("pipeline", type=Path)
    parser.add_argument("--work", type=Path, required=True, help="output, checkpoints and Spark's scratch space")
    parser.add_argument("--result", type=Path, help="write every query's progress reports here (JSON)")
    parser.add_argument("--cores", type=int, default=2, help="local[N] (default 2)")
    parser.add_argument("--java-options", default="", help="JVM options of the driver (default: the JVM's own)")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                        help="a Spark setting (repeatable), e.g. the state store provider")
    args = parser.parse_args()
    spec = load_pipeline(args.pipeline)
    module = load_entry_module(spec.entry_point, spec.base_dir)
    partitions = max(s.parallelism for s in spec.stages)
    conf = {"spark.sql.shuffle.partitions": str(partitions), "spark.sql.streaming.numRecentProgressUpdates": "100000",
            **dict(c.split("=", 1) for c in args.conf)}
    spark = build_session(f"local[{args.cores}]", conf, args.work / "spark", "vs-spark-ss", args.java_options)
    translation = Translation(spark, spec, module)
    queries = []
    for stage in spec.stages:
        if stage.kind is StageKind.SINK:
            df, stateful = translation.frame(stage.name)
            queries.append(start(stage.name, df, stateful, args.work))
    for query in queries:
        query.processAllAvailable()
    if args.result:
        args.result.write_text(json.dumps({q.name: progress(q) for q in queries}))
    for query in queries:
        query.stop()
    spark.stop()


if __name__ == "__main__":
    main()
