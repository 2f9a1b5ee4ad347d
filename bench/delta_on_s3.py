"""Who writes a step to a Delta table in a bucket: delta-rs in the sidecar, or delta-spark over S3A in Spark.

A Delta sink's release appends a step's staged parts to the table in one
commit carrying the step as its application transaction (``barrier/delta.py``).
On a local volume the worker's Spark process does it with delta-spark; on
``s3://`` two ways could:

- ``delta-rs``: the sidecar reads the parts (Parquet in the bucket) with
  pyarrow and commits with ``deltalake.write_deltalake``; the commit file
  goes up with a conditional put (``If-None-Match: *``), so of two writers
  one wins and the other's transaction is refused;
- ``delta-spark``: the worker's Spark process reads the parts through
  Hadoop's S3A connector and appends with delta-spark, as it does on a
  volume. S3A needs ``hadoop-aws`` and the AWS SDK's bundle on the class
  path (``--s3a-jars``: a directory holding them; their size is printed).

Both release the same steps (``--parts`` parts of ``--rows`` rows each) to
tables of their own on one embedded S3 server, alternating which goes first
each step, after ``--warmup`` steps each that are not counted (the JVM's
classes load, delta-rs's first snapshot). Printed: the median release per
step, rows per second, the ratio, and a second writer from the same snapshot
trying the same step again (what a zombie's late write would do):
refused or not.

    python bench/delta_on_s3.py --s3a-jars DIR
    python bench/delta_on_s3.py --s3a-jars DIR --steps 40 --parts 8 --rows 50000
"""

from __future__ import annotations

import argparse
import io
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from ftpipeline.embedded.jars import DELTA
from ftpipeline.embedded.s3 import EmbeddedS3
from ftpipeline.objectstore.base import open_store
from ftpipeline.objectstore.config import S3Config

BUCKET = "bench-delta"
APP = "bench"


def part(step: int, channel: int, rows: int) -> bytes:
    base = (step * 1000 + channel) * rows
    table = pa.table({"user": pa.array([f"u{(base + i) % 9973}" for i in range(rows)]),
                      "n": pa.array(range(base, base + rows), pa.int64()),
                      "amount": pa.array([float(i % 997) for i in range(rows)])})
    sink = io.BytesIO()
    pq.write_table(table, sink)
    return sink.getvalue()


Release = Callable[[int, list[str]], None]
Zombie = Callable[[], "bool | None"]


def delta_rs(root: str, config: S3Config) -> tuple[Release, Zombie]:
    from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
    from deltalake.exceptions import TableNotFoundError

    from ftpipeline.barrier.delta import storage_options

    options = storage_options(config) if root.startswith("s3://") else {}
    uri = f"{root}/rs"
    store = open_store(root, config)

    def release(step: int, parts: list[str]) -> None:
        data = pa.concat_tables(pq.read_table(io.BytesIO(store.get(p))) for p in parts)
        try:
            table: DeltaTable | str = DeltaTable(uri, storage_options=options)
        except TableNotFoundError:
            table = uri
        write_deltalake(table, data, mode="append", storage_options=options,
                        commit_properties=CommitProperties(app_transactions=[Transaction(APP, step)]))

    def zombie_refused() -> bool:
        first, second = (DeltaTable(uri, storage_options=options) for _ in range(2))
        step = int(first.transaction_version(APP) or 0) + 1
        one = pa.table({"user": ["z"], "n": [0], "amount": [0.0]})
        write_deltalake(first, one, mode="append",
                        commit_properties=CommitProperties(app_transactions=[Transaction(APP, step)]))
        try:
            write_deltalake(second, one, mode="append",
                            commit_properties=CommitProperties(app_transactions=[Transaction(APP, step)]))
        except Exception:  # noqa: BLE001 - delta-rs raises CommitFailedError
            return True
        return False

    return release, zombie_refused


def delta_spark(root: str, config: S3Config, jars: Path | None, work: Path) -> tuple[Release, Zombie]:
    from pyspark.sql import SparkSession

    from ftpipeline.barrier.delta import SPARK_SETTINGS

    s3a = sorted(str(p) for p in jars.glob("*.jar")) if jars else []
    builder = (SparkSession.builder.master("local[2]").appName("bench-delta-s3a")
               .config("spark.jars", ",".join([*map(str, DELTA.paths()), *s3a]))
               .config("spark.local.dir", str(work))
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.ui.enabled", "false")
               .config("spark.hadoop.fs.s3a.endpoint", config.endpoint or "")
               .config("spark.hadoop.fs.s3a.endpoint.region", config.region)
               .config("spark.hadoop.fs.s3a.path.style.access", "true")
               .config("spark.hadoop.fs.s3a.connection.ssl.enabled", "false")
               .config("spark.hadoop.fs.s3a.access.key", config.access_key or "")
               .config("spark.hadoop.fs.s3a.secret.key", config.secret_key or ""))
    for key, value in SPARK_SETTINGS.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    base = root.replace("s3://", "s3a://", 1)
    uri = f"{base}/spark"

    def release(step: int, parts: list[str]) -> None:
        frame = spark.read.parquet(*(f"{base}/{p}" for p in parts))
        (frame.write.format("delta").mode("append").option("txnAppId", APP).option("txnVersion", step)
         .save(uri))

    def zombie_refused() -> bool | None:
        return None  # not tried: one Spark driver here (on S3A, delta-spark's log store locks within a driver)

    return release, zombie_refused


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--s3a-jars", type=Path, help="a directory holding hadoop-aws and the AWS SDK bundle; "
                                                      "without it (and without --volume), delta-rs alone")
    parser.add_argument("--volume", action="store_true",
                        help="tables and parts in a local directory instead (today's release on a volume)")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--parts", type=int, default=4)
    parser.add_argument("--rows", type=int, default=20_000)
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="bench-delta-"))
    server = EmbeddedS3(work / "s3").start()
    try:
        server.create_bucket(BUCKET)
        config = server.config
        root = str(work / "volume") if args.volume else f"s3://{BUCKET}"
        store = open_store(root, config)
        systems = {"delta-rs": delta_rs(root, config)}
        if args.s3a_jars or args.volume:
            systems["delta-spark"] = delta_spark(root, config, args.s3a_jars, work / "spark")
        times: dict[str, list[float]] = {name: [] for name in systems}
        for step in range(1, args.warmup + args.steps + 1):
            parts = []
            for channel in range(args.parts):
                key = f"staged/step={step}/part-{channel}.parquet"
                store.put(key, part(step, channel, args.rows))
                parts.append(key)
            order = list(systems) if step % 2 else list(reversed(systems))
            for name in order:
                start = time.perf_counter()
                systems[name][0](step, parts)
                if step > args.warmup:
                    times[name].append(time.perf_counter() - start)
        rows = args.parts * args.rows
        print(f"on {'a local directory' if args.volume else 'the embedded S3 server'}: {args.steps} steps of {args.parts} parts x {args.rows} rows ({rows} rows a step), "
              f"after {args.warmup} warm-up steps each, alternating")
        medians = {name: statistics.median(t) for name, t in times.items()}
        for name, median in medians.items():
            print(f"  {name:12s} release median {median * 1000:8.1f} ms  {rows / median:12,.0f} rows/s  "
                  f"a second writer of the same step from the same snapshot refused: {systems[name][1]()}")
        if "delta-spark" in medians:
            print(f"  delta-rs / delta-spark, time per release: {medians['delta-rs'] / medians['delta-spark']:.2f}")
        if args.s3a_jars:
            size = sum(p.stat().st_size for p in args.s3a_jars.glob("*.jar"))
            print(f"  S3A's jars (hadoop-aws, the AWS SDK bundle): {size / 1e6:.0f} MB more in the image; "
                  f"delta-rs: none (deltalake is already a dependency)")
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
