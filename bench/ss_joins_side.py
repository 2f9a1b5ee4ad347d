"""The Spark Structured Streaming side of ``bench/joins.py``: an interval-joining FTPipeline file run as one SS query.

The pipeline's document is translated, so both sides run the same job: each of the join's two file sources
becomes a streaming Parquet source with ``maxFilesPerTrigger`` = its parallelism (one step's files per
micro-batch), its ``eventTime`` a ``withWatermark`` with the same bound (a long of milliseconds made a
timestamp first); the join becomes SS's stream-stream join on the keys with the time-range condition
``right.ts BETWEEN left.ts + lower AND left.ts + upper`` (SS evicts each side's state by the watermark, as
ftpipeline does), the right side's columns renamed as ftpipeline names them; the sink is Spark's Parquet file
sink in ``WORK/out/<sink>``, append mode. The checkpoint is in ``WORK/checkpoint``; the state store is RocksDB.

    python bench/ss_joins_side.py PIPELINE.yaml --work DIR [--cores 2] [--result FILE] [--java-options OPTS]

It runs until every input file is processed (``processAllAvailable``); each batch's progress report then
goes to ``--result``. Started again with the same ``--work`` it resumes from its checkpoint.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from pyspark.sql import functions as F

from ftpipeline.spec.load import load_pipeline
from ftpipeline.worker.session import build_session

ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("pipeline", type=Path)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--result", type=Path)
    parser.add_argument("--java-options", default="")
    args = parser.parse_args()
    spec = load_pipeline(args.pipeline)
    [stage] = [s for s in spec.stages if s.join is not None]
    [sink] = [s for s in spec.stages if s.is_sink]
    op = stage.join
    assert op is not None
    conf = {"spark.sql.shuffle.partitions": str(args.cores), "spark.sql.streaming.numRecentProgressUpdates": "100000",
            "spark.sql.streaming.stateStore.providerClass": ROCKSDB}
    spark = build_session(f"local[{args.cores}]", conf, args.work / "spark", "bench-joins-ss", args.java_options)
    frames = []
    for name, column, prefix in ((op.left, op.left_time, "l_"), (op.right, op.right_time, "r_")):
        source = spec.stage(name)
        assert source.file is not None and source.event_time is not None
        schema = spark.read.parquet(str(source.file.path)).schema
        df = spark.readStream.schema(schema).option("maxFilesPerTrigger", source.parallelism).parquet(
            str(source.file.path))
        df = df.withColumn(f"{prefix}t", F.timestamp_millis(F.col(column)))
        df = df.withWatermark(f"{prefix}t", f"{source.event_time.max_out_of_orderness_us // 1000} milliseconds")
        frames.append(df.select(*[F.col(c).alias(prefix + c) for c in df.columns if not c.startswith(prefix)],
                                F.col(f"{prefix}t")))
    left, right = frames
    cond = F.lit(True)
    for key in op.keys:
        cond = cond & (F.col(f"l_{key}") == F.col(f"r_{key}"))
    cond = cond & (F.col("r_t") >= F.col("l_t") + F.expr(f"INTERVAL {op.lower_us // 1000} MILLISECONDS")) & (
        F.col("r_t") <= F.col("l_t") + F.expr(f"INTERVAL {op.upper_us // 1000} MILLISECONDS"))
    how = {"inner": "inner", "left": "leftOuter", "right": "rightOuter", "full": "fullOuter"}[op.kind]
    joined = left.join(right, cond, how).drop("l_t", "r_t")
    query = (joined.writeStream.queryName(sink.name).format("parquet").outputMode("append")
             .option("path", str(args.work / "out" / sink.name))
             .option("checkpointLocation", str(args.work / "checkpoint")).start())
    query.processAllAvailable()
    if args.result:
        args.result.write_text(json.dumps([json.loads(p.json) for p in query.recentProgress]))
    query.stop()
    spark.stop()


if __name__ == "__main__":
    main()
