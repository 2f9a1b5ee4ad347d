"""The oracle of a lookup stage (``dataflow/lookup.py``): each step's rows joined, in Spark, to the table at the
version the step recorded (the run's step history), read without the runtime's reader (a Delta table from its
log, ``oracle/delta.py``; a compacted Kafka topic with a plain consumer; a Parquet directory's files)."""

from __future__ import annotations

import io
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ftpipeline.dataflow.lookup_kafka import ends_of
from ftpipeline.kafka.topics import Record, read_committed
from ftpipeline.objectstore.base import open_store
from ftpipeline.oracle.delta import table_at
from ftpipeline.oracle.files import STEP, json_row, types_of
from ftpipeline.spec.model import StageSpec


def _kafka_table(records: list[Record], schema: tuple[tuple[str, str], ...]) -> Any:
    """A compacted topic's table at a version (each partition's end): the last value of each (partition,
    key) below the ends, a null value deleting it, a value that is no row of the schema changing nothing."""
    types = types_of(list(schema))

    def at(version: str) -> pa.Table:
        ends = ends_of(version)
        rows: dict[tuple[int, bytes], dict[str, Any]] = {}
        for r in records:
            if r.offset >= ends.get(r.partition, 0) or r.key is None:
                continue
            row = None if r.value is None else json_row(r.value, list(schema))
            if r.value is None:
                rows.pop((r.partition, r.key), None)
            elif row is not None:
                rows[(r.partition, r.key)] = row
        return pa.Table.from_pylist(list(rows.values()), schema=types)
    return at


def _table(stage: StageSpec, bootstrap: str) -> Any:
    op = stage.lookup
    assert op is not None
    if op.kafka is not None:
        return _kafka_table(read_committed(bootstrap, op.kafka.topic), op.kafka.schema)
    store = open_store(op.path)
    if op.delta is not None:
        return lambda version: table_at(store, int(version))
    files = sorted(k for k in store.list() if k.endswith(".parquet") and not k.split("/")[-1].startswith(("_", ".")))
    tables = [pq.read_table(store.local_path(k) or io.BytesIO(store.get(k))) for k in files]
    whole = pa.concat_tables(tables, promote_options="permissive") if tables else pa.table({})
    return lambda version: whole


def looked_up(spark: Any, df: Any, stage: StageSpec, versions: dict[int, dict[str, Any]], bootstrap: str = "") -> Any:
    """The stage's expected output, with a ``STEP`` column."""
    from pyspark.sql import functions as F

    op = stage.lookup
    assert op is not None
    keys = list(op.keys)
    read = _table(stage, bootstrap)
    by_version: dict[Any, list[int]] = {}
    for step, recorded in versions.items():
        if stage.name in recorded:
            by_version.setdefault(recorded[stage.name], []).append(step)
    out = None
    types = dict(df.dtypes)
    for version, steps in sorted(by_version.items(), key=lambda kv: min(kv[1])):
        table = spark.createDataFrame(read(version))
        others = [c for c in table.columns if c not in keys]
        table = table.select(*[F.col(k).cast(types[k]).alias(k) for k in keys],
                             *[F.col(c).alias(f"table_{c}" if c in df.columns else c) for c in others])
        part = df.filter(F.col(STEP).isin(steps)).join(table, keys, "inner" if op.kind == "inner" else "left")
        out = part if out is None else out.unionByName(part)
    return out if out is not None else df.limit(0)
