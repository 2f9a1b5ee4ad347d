"""The Spark Structured Streaming side of ``bench/windows.py``: a windowed FTPipeline file run as one SS query.

The pipeline's own document is translated, so both sides run the same job: the file source becomes
a streaming Parquet source with the same schema and ``maxFilesPerTrigger`` = its parallelism (one
step's files per micro-batch; not with ``--until``, the live feed: a batch then takes every file that
arrived, so a batch slower than the feed catches up as an SS user's live query would); the source's
``eventTime`` becomes ``withWatermark`` on that column (a long of milliseconds is made a timestamp first) with its ``maxOutOfOrderness``; the windowed
aggregate becomes ``groupBy(window(ts, size), *keyBy)`` with the same aggregations, in ``append``
output mode (each window once, when the watermark passes its end); the sink is Spark's Parquet file
sink (exactly once through its ``_spark_metadata`` log) in ``WORK/out/<sink>``, the window's bounds
flattened to ``window_start`` / ``window_end`` as ftpipeline names them. The checkpoint is in
``WORK/checkpoint`` and the state store is RocksDB.

    python bench/ss_windows_side.py PIPELINE.yaml --work DIR [--cores 2] [--result FILE]
                                    [--until FILE] [--java-options OPTS]

Without ``--until`` it runs until every input file is processed (``processAllAvailable``);
with it, micro-batches run back to back (new files are picked up as they appear) until FILE
exists. Then each batch's progress report goes to ``--result``. Started again with the same
``--work`` it resumes from its checkpoint.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from pyspark.sql import Column
from pyspark.sql import functions as F

from ftpipeline.spec.load import load_pipeline
from ftpipeline.spec.model import Aggregation, StageKind
from ftpipeline.worker.session import build_session

SQL_TYPES = {"string": "STRING", "long": "BIGINT", "double": "DOUBLE", "boolean": "BOOLEAN"}
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


def interval(us: int) -> str:
    return f"{us // 1000} milliseconds"


def aggregation(a: Aggregation) -> Column:
    if a.op == "count":
        return F.count(F.lit(1)).alias(a.name)
    if a.op in ("sum", "min", "max", "avg", "first", "last"):
        column: Column = getattr(F, a.op)(F.col(str(a.column)))
        return column.alias(a.name)
    raise ValueError(f"aggregation {a.op!r} has no counterpart here")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("pipeline", type=Path)
    parser.add_argument("--work", type=Path, required=True, help="output, checkpoint and Spark's scratch space")
    parser.add_argument("--cores", type=int, default=2, help="local[N] and shuffle partitions (default 2)")
    parser.add_argument("--result", type=Path, help="write the query's progress reports here (JSON)")
    parser.add_argument("--until", type=Path, help="run until this file exists (default: until the input is read)")
    parser.add_argument("--java-options", default="", help="JVM options of the driver (default: the JVM's own)")
    args = parser.parse_args()
    spec = load_pipeline(args.pipeline)
    [src] = [s for s in spec.stages if s.kind is StageKind.SOURCE]
    [agg] = [s for s in spec.stages if s.aggregate is not None]
    [sink] = [s for s in spec.stages if s.is_sink]
    op, f, et = agg.aggregate, src.file, src.event_time
    if op is None or op.window is None or f is None or et is None or op.window.kind != "tumbling":
        raise SystemExit("needs a file source with eventTime -> an aggregate with a tumbling window -> a sink")
    conf = {"spark.sql.shuffle.partitions": str(args.cores), "spark.sql.streaming.numRecentProgressUpdates": "100000",
            "spark.sql.streaming.stateStore.providerClass": ROCKSDB}
    spark = build_session(f"local[{args.cores}]", conf, args.work / "spark", "bench-windows-ss", args.java_options)
    schema = ", ".join(f"`{name}` {SQL_TYPES[kind]}" for name, kind in f.schema)
    reader = spark.readStream.schema(schema)
    if args.until is None:
        reader = reader.option("maxFilesPerTrigger", src.parallelism)
    views = reader.parquet(str(f.path))
    ts = et.column
    if dict(f.schema).get(ts) == "long":  # milliseconds since the epoch
        views = views.withColumn(ts, F.timestamp_millis(F.col(ts)))
    keys = list(op.key_by)
    windows = (views.withWatermark(ts, interval(et.max_out_of_orderness_us))
               .groupBy(F.window(F.col(ts), interval(op.window.size_us)).alias("window"), *keys)
               .agg(*[aggregation(a) for a in op.aggregations]))
    out = windows.select(*keys, F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end"),
                         *[a.name for a in op.aggregations])
    query = (out.writeStream.queryName(sink.name).format("parquet").outputMode("append")
             .option("path", str(args.work / "out" / sink.name))
             .option("checkpointLocation", str(args.work / "checkpoint")).start())
    if args.until is None:
        query.processAllAvailable()
    else:
        while query.isActive and not args.until.exists():
            time.sleep(0.1)
        if query.exception() is not None:
            raise SystemExit(f"the query failed: {query.exception()}")
    if args.result:
        args.result.write_text(json.dumps([json.loads(p.json) for p in query.recentProgress]))
    query.stop()
    spark.stop()


if __name__ == "__main__":
    main()
