"""The Spark Structured Streaming side of ``bench/kafka.py``: the Kafka example as one SS query.

The same dataflow as ``examples/kafka-clickstream``: the topic's JSON values parsed with the
pipeline's schema (malformed ones dropped, as ftpipeline sends them to dead letters), the
example's own ``clean_events``, the same running per-user aggregate in ``update`` mode, written
to the output topic keyed by user with Spark's Kafka sink (at least once: Spark has no
transactional Kafka sink). ``maxOffsetsPerTrigger`` is the pipeline's ``maxRecordsPerStep``.

    python bench/ss_kafka_side.py PIPELINE.yaml --bootstrap HOST:PORT --jars A.jar,B.jar --work DIR
        [--available-now | --seconds S [--real-time D]] [--result FILE] [--cores 2]

``--available-now`` reads what the topic holds and stops (Spark's ``Trigger.AvailableNow``);
``--seconds S`` runs micro-batches back to back for S seconds (with ``--real-time D``, Spark's
real-time mode's batches of duration D instead). A pipeline with no aggregate stage writes its
cleaned events (``update`` mode of a stateless query: each row once). Started again with the same
``--work`` it resumes from its checkpoint. Each batch's progress report goes to FILE.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from ftpipeline.spec.load import load_entry_module, load_pipeline

SQL_TYPES = {"string": "STRING", "long": "BIGINT", "double": "DOUBLE", "boolean": "BOOLEAN"}
MERGE = {"count": "count", "sum": "sum", "min": "min", "max": "max"}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("pipeline", type=Path)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--jars", required=True)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--result", type=Path)
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--available-now", action="store_true")
    parser.add_argument("--seconds", type=float, default=0.0)
    parser.add_argument("--real-time", default="", help="real-time mode with this batch duration (e.g. '5 minutes')")
    args = parser.parse_args()
    spec = load_pipeline(args.pipeline)
    module = load_entry_module(spec.entry_point, spec.base_dir)
    [src] = [s for s in spec.stages if s.kafka is not None]
    [clean] = [s for s in spec.stages if s.function is not None]
    aggregates = [s for s in spec.stages if s.aggregate is not None]  # none: the cleaned events go straight out
    [sink] = [s for s in spec.stages if s.kafka_sink is not None]
    assert src.kafka is not None and sink.kafka_sink is not None and clean.function
    spark = (SparkSession.builder.master(f"local[{args.cores}]").appName("ss-kafka")
             .config("spark.jars", args.jars).config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", str(args.cores))
             .config("spark.sql.streaming.numRecentProgressUpdates", "100000")
             .config("spark.sql.streaming.stateStore.providerClass",
                     "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")
             .getOrCreate())
    spark.sparkContext.setLogLevel("WARN")
    schema = ", ".join(f"`{n}` {SQL_TYPES[k]}" for n, k in src.kafka.schema)
    raw = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", args.bootstrap)
           .option("subscribe", src.kafka.topic).option("startingOffsets", "earliest")
           .option("kafka.isolation.level", "read_committed").option("failOnDataLoss", "true"))
    if src.kafka.max_records_per_step and not args.real_time:  # real-time mode takes no per-batch limit
        raw = raw.option("maxOffsetsPerTrigger", src.kafka.max_records_per_step)
    rows = (raw.load().select(F.from_json(F.col("value").cast("string"), schema).alias("r")).select("r.*")
            .dropna(how="all"))
    totals = getattr(module, clean.function)(rows)
    if aggregates:
        [agg] = aggregates
        assert agg.aggregate is not None
        keys = list(agg.aggregate.key_by)
        totals = totals.dropna(subset=keys).groupBy(*keys).agg(*[
            (F.count(F.lit(1)) if a.op == "count" else getattr(F, MERGE[a.op])(F.col(str(a.column)))).alias(a.name)
            for a in agg.aggregate.aggregations])
    key = sink.kafka_sink.key
    out = totals.select(
        (F.col(key[0]).cast("string") if len(key) == 1 else F.to_json(F.array(*key))).alias("key"),
        F.to_json(F.struct(*totals.columns)).alias("value"))
    writer = (out.writeStream.format("kafka").option("kafka.bootstrap.servers", args.bootstrap)
              .option("topic", sink.kafka_sink.topic).option("checkpointLocation", str(args.work / "checkpoint"))
              .outputMode("update"))
    if args.available_now:
        writer = writer.trigger(availableNow=True)
    elif args.real_time:  # Spark 4.1's real-time mode: long-running batches, records out as they come (stateless)
        writer = writer.trigger(realTime=args.real_time)
    else:
        writer = writer.trigger(processingTime="0 seconds")
    query = writer.start()
    if args.available_now:
        query.awaitTermination()
    else:
        deadline = time.monotonic() + args.seconds
        while time.monotonic() < deadline and query.isActive:
            time.sleep(0.2)
        query.stop()
    if args.result:
        args.result.write_text(json.dumps([json.loads(p.json) for p in query.recentProgress]))
    spark.stop()


if __name__ == "__main__":
    main()
