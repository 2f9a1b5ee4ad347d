"""The Spark Structured Streaming side of ``bench/joins.py --jobs process``: the keyed function as
``transformWithStateInPandas``.

The pipeline's document names its source (a Parquet directory with an event-time column of milliseconds)
and the keyed stage's keys; the function is the bench's own (``IdleKeys`` in ``bench/joins.py``, here as a
``StatefulProcessor``): per key its rows' event times in list state and a timer ``--gap-ms`` after each; a
timer finding the newest row up to it exactly the gap old emits the count of those rows and forgets them.
Source: a streaming Parquet source, ``maxFilesPerTrigger`` = its parallelism
(one step's files per micro-batch), ``withWatermark`` with the pipeline's bound; the RocksDB state store
(which ``transformWithState`` requires), no micro-batches without data (the watermark moves only with
batches of rows, as ftpipeline's steps); the output to Spark's Parquet file sink in ``WORK/out/<sink>``.

    python bench/ss_process_side.py PIPELINE.yaml --work DIR [--cores 2] [--gap-ms 10000] [--result FILE]

Runs until every input file is processed (``processAllAvailable``); each batch's progress report then goes
to ``--result``. Started again with the same ``--work`` it resumes from its checkpoint. Needs pandas and
protobuf (``pip install -e '.[bench]'``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
from pyspark.sql import functions as F
from pyspark.sql.streaming.stateful_processor import (ExpiredTimerInfo, StatefulProcessor, StatefulProcessorHandle,
                                                      TimerValues)
from pyspark.sql.types import LongType, StructField, StructType

from ftpipeline.spec.load import load_pipeline
from ftpipeline.worker.session import build_session

ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
LONG = StructType([StructField("v", LongType())])


class IdleKeys(StatefulProcessor):
    gap_ms = 10_000

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.times = handle.getListState("times", LONG)

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame], timerValues: TimerValues
                        ) -> Iterator[pd.DataFrame]:
        for frame in rows:
            times = [int(t) for t in frame["ts"]]
            self.times.appendList([(t,) for t in times])
            for t in set(times):
                self.handle.registerTimer(t + self.gap_ms)
        return iter([])

    def handleExpiredTimer(self, key: Any, timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo
                           ) -> Iterator[pd.DataFrame]:
        due = expiredTimerInfo.getExpiryTimeInMs()
        times = [int(row[0]) for row in self.times.get()]
        if max((t for t in times if t <= due), default=None) != due - self.gap_ms:
            return  # a row came within the gap: a later timer decides
        rest = [t for t in times if t > due - self.gap_ms]
        if rest:
            self.times.put([(t,) for t in rest])
        else:
            self.times.clear()
        yield pd.DataFrame({"key": [int(key[0])], "rows": [len(times) - len(rest)], "newest": [due - self.gap_ms]})

    def close(self) -> None:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("pipeline", type=Path)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--gap-ms", type=int, default=10_000)
    parser.add_argument("--result", type=Path)
    parser.add_argument("--java-options", default="")
    args = parser.parse_args()
    spec = load_pipeline(args.pipeline)
    [stage] = [s for s in spec.stages if s.process is not None]
    [sink] = [s for s in spec.stages if s.is_sink]
    [source] = [s for s in spec.stages if s.file is not None]
    assert stage.process is not None and source.file is not None and source.event_time is not None
    [key] = stage.process.keys
    IdleKeys.gap_ms = args.gap_ms
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # the Python workers need this one's pandas
    conf = {"spark.sql.shuffle.partitions": str(args.cores), "spark.sql.streaming.numRecentProgressUpdates": "100000",
            "spark.sql.streaming.stateStore.providerClass": ROCKSDB,
            # no batch of no data after the last file to move the watermark on: a step of ftpipeline runs with the
            # watermark its earlier steps set, so both fire the same timers
            "spark.sql.streaming.noDataMicroBatches.enabled": "false"}
    spark = build_session(f"local[{args.cores}]", conf, args.work / "spark", "bench-process-ss", args.java_options)
    schema = spark.read.parquet(str(source.file.path)).schema
    df = spark.readStream.schema(schema).option("maxFilesPerTrigger", source.parallelism).parquet(
        str(source.file.path))
    df = df.withColumn("t", F.timestamp_millis(F.col(source.event_time.column)))
    df = df.withWatermark("t", f"{source.event_time.max_out_of_orderness_us // 1000} milliseconds")
    out = "key long, rows long, newest long"
    keyed = df.select(F.col(key).alias("key"), F.col(source.event_time.column).alias("ts"), "t").groupBy("key")
    result = keyed.transformWithStateInPandas(IdleKeys(), out, "Append", "EventTime")
    query = (result.writeStream.queryName(sink.name).format("parquet").outputMode("append")
             .option("path", str(args.work / "out" / sink.name))
             .option("checkpointLocation", str(args.work / "checkpoint")).start())
    query.processAllAvailable()
    if args.result:
        args.result.write_text(json.dumps([json.loads(p.json) for p in query.recentProgress]))
    query.stop()
    spark.stop()


if __name__ == "__main__":
    main()
