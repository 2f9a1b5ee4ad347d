"""The workloads of ``bench/vs_spark.py``: their input files, their FTPipeline documents, and the
user functions of the two that are not the clickstream example (this file is their entry point, so
ftpipeline's workers and the Spark Structured Streaming side call the very same functions).

Input is written once per step size, as one file per (step, source channel) holding exactly that
channel's share of the step: ftpipeline's file source (``rowsPerStep`` = step size) then reads
exactly the files of step k in step k, and Spark's file source (``maxFilesPerTrigger`` = source
parallelism, files ordered by modification time, which rises with k) reads the same files in
micro-batch k.
"""

from __future__ import annotations

import itertools
import json
import os
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import yaml
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ftpipeline.dataflow.sources import channel_share
from ftpipeline.dataflow.sources.generator import GeneratorReader
from ftpipeline.spec.load import load_entry_module
from ftpipeline.spec.model import GeneratorSource

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "clickstream"
WORKLOADS = ("aggregate", "six-stage", "stateless", "many-channels", "deep-chain")
# many-channels: channels per stage as a user sizes them for a bigger cluster (source, enrich,
# aggregate, filter, the two sinks), more than the cores the benchmark gives either side
WIDE = {"orders": 4, "enrich": 6, "per-country-user": 8, "big-orders": 6, "totals": 4, "big": 2}
CLICK_SCHEMA = {"event_id": "string", "user_id": "string", "event_type": "string", "page": "long",
                "amount_cents": "long", "is_bot": "boolean", "ts_ms": "long"}
ORDER_SCHEMA = {"order_id": "string", "user_id": "string", "country": "string", "amount_cents": "long", "qty": "long"}
COUNTRIES = np.array(["de", "fr", "nl", "it", "es", "pl", "se", "at", "be", "pt"])
MALFORMED = 0.02  # share of order records that are dead letters for ftpipeline, dropped by Spark (DROPMALFORMED)
ARROW = {"string": pa.string(), "long": pa.int64(), "boolean": pa.bool_()}


# --- user functions (six-stage, stateless) --------------------------------------------

def enrich_orders(df: DataFrame) -> DataFrame:
    """Order value in euros; an order is big from 500 EUR."""
    total = F.col("amount_cents") * F.col("qty") / 100.0
    return df.withColumn("total_eur", total).withColumn("big", total >= 500)


def big_orders(df: DataFrame) -> DataFrame:
    """The side output: big orders only."""
    return df.filter(F.col("big")).select("order_id", "user_id", "country", "total_eur")


def tag_events(df: DataFrame) -> DataFrame:
    """Enrich: site section of the page, revenue in euros, engagement flag."""
    return (df.withColumn("section", F.floor(F.col("page") / 50))
            .withColumn("revenue_eur", F.when(F.col("event_type") == "purchase", F.col("amount_cents") / 100.0)
                        .otherwise(0.0))
            .withColumn("engaged", F.col("event_type") != "view"))


def engaged_only(df: DataFrame) -> DataFrame:
    """Filter: engaged events of real users."""
    return df.filter(F.col("engaged") & ~F.col("is_bot") & (F.col("user_id") != ""))


def shape(df: DataFrame) -> DataFrame:
    """Project: the columns downstream readers want, with the event's day."""
    return df.select("event_id", "user_id", "event_type", "section", "revenue_eur",
                     F.floor(F.col("ts_ms") / 86_400_000).alias("day"))


# --- input files -----------------------------------------------------------------------

def file_name(step: int, channel: int, parallelism: int, suffix: str) -> str:
    """A name that ftpipeline's file source puts in ``channel`` (crc32 of the name) and sorts by step."""
    for salt in itertools.count():
        name = f"s{step:05d}-c{channel}-{salt}.{suffix}"
        if zlib.crc32(name.encode()) % parallelism == channel:
            return name
    raise AssertionError("unreachable")


def _stamp(path: Path, step: int) -> None:
    """Spark's file source orders files by modification time: step k's files are older than k+1's."""
    ns = 1_767_225_600_000_000_000 + step * 1_000_000_000
    os.utime(path, ns=(ns, ns))


def clicks(directory: Path, rows: int, steps: int, parallelism: int, fmt: str = "parquet") -> None:
    """The clickstream example's generated events (its own generator function), as Parquet files
    (``fmt`` jsonl: as JSON Lines)."""
    module = load_entry_module(str(EXAMPLE / "clickstream.py"), EXAMPLE)
    reader = GeneratorReader(GeneratorSource("generate_events", rows, 7), module)
    schema = pa.schema([pa.field(n, ARROW[t]) for n, t in CLICK_SCHEMA.items()])
    directory.mkdir(parents=True, exist_ok=True)
    for c in range(parallelism):
        share = channel_share(rows, parallelism, c)
        for step in range(1, steps + 1):
            table = reader.read(c, step, (step - 1) * share, step * share).table.select(schema.names).cast(schema)
            path = directory / file_name(step, c, parallelism, fmt)
            if fmt == "jsonl":
                path.write_text("".join(json.dumps(r) + "\n" for r in table.to_pylist()))
            else:
                pq.write_table(table, path)
            _stamp(path, step)


def _order_lines(rng: np.random.Generator, prefix: str, n: int) -> list[str]:
    users = rng.zipf(1.3, n) % 5_000
    countries = rng.choice(COUNTRIES, n)
    amounts = rng.integers(100, 40_000, n)
    qty = rng.integers(1, 6, n)
    bad = rng.random(n)
    lines = []
    for i in range(n):
        if bad[i] < MALFORMED / 2:
            lines.append('{"order_id": "broken", "amount_cents": "lots"')  # not JSON
        elif bad[i] < MALFORMED:
            lines.append(json.dumps({"order_id": f"{prefix}{i}", "user_id": f"u{users[i]}", "country": "de",
                                     "amount_cents": "lots", "qty": 1}))  # a string where a long belongs
        else:
            lines.append(json.dumps({"order_id": f"{prefix}{i}", "user_id": f"u{users[i]}",
                                     "country": str(countries[i]), "amount_cents": int(amounts[i]),
                                     "qty": int(qty[i])}))
    return lines


def orders(directory: Path, rows: int, steps: int, parallelism: int) -> None:
    """Orders as JSON Lines, 2% of them malformed."""
    directory.mkdir(parents=True, exist_ok=True)
    for c in range(parallelism):
        share = channel_share(rows, parallelism, c)
        for step in range(1, steps + 1):
            rng = np.random.default_rng([11, c, step])
            path = directory / file_name(step, c, parallelism, "jsonl")
            path.write_text("\n".join(_order_lines(rng, f"o{step}-{c}-", share)) + "\n")
            _stamp(path, step)


# --- pipeline documents -------------------------------------------------------------------

COUNTRY_USER = {"keyBy": ["country", "user_id"],
                "aggregations": [{"name": "orders", "op": "count"}, {"name": "eur", "op": "sum", "column": "total_eur"},
                                 {"name": "largest_cents", "op": "max", "column": "amount_cents"}]}


def _stage(name: str, parallelism: int, inputs: list[str], hash_by: tuple[str, ...] = (),
           **kind: Any) -> dict[str, Any]:
    """A stage; ``hash_by``: its input edges are hash-partitioned on these columns."""
    stage: dict[str, Any] = {"name": name, "parallelism": parallelism}
    if inputs:
        stage["inputs"] = [{"stage": i} | ({"partition": "hash", "keys": list(hash_by)} if hash_by else {})
                           for i in inputs]
    return stage | kind


def _file_source(data: Path, fmt: str, rows: int, schema: dict[str, str]) -> dict[str, Any]:
    return {"file": {"path": str(data), "format": fmt, "rowsPerStep": rows, "schema": dict(schema)}}


def _sink(path: Path) -> dict[str, Any]:
    return {"parquet": {"path": str(path)}}


def stages(workload: str, data: Path, out: Path, rows: int, p: int,
           clicks_as: str = "parquet") -> tuple[str, list[dict[str, Any]]]:
    """(entry point, stages) of a workload; sinks write to ``out/<sink name>``; the clicks are read as
    ``clicks_as`` (parquet, or jsonl)."""
    if workload == "aggregate":
        doc = yaml.safe_load((EXAMPLE / "pipeline.yaml").read_text())
        found: list[dict[str, Any]] = doc["spec"]["stages"]
        for stage in found:
            stage["parallelism"] = p
            if "source" in stage:
                stage["source"] = _file_source(data, clicks_as, rows, CLICK_SCHEMA)
            if "sink" in stage:
                stage["sink"] = _sink(out / stage["name"])
        return str(EXAMPLE / "clickstream.py"), found
    here = str(Path(__file__).resolve())
    if workload == "many-channels":  # the six-stage dataflow, 30 tasks a step, four hash edges
        w = WIDE
        return here, [
            _stage("orders", w["orders"], [], source=_file_source(data, "jsonl", rows, ORDER_SCHEMA)),
            _stage("enrich", w["enrich"], ["orders"], ("order_id",), transform={"function": "enrich_orders"}),
            _stage("per-country-user", w["per-country-user"], ["enrich"], aggregate=COUNTRY_USER),
            _stage("big-orders", w["big-orders"], ["enrich"], transform={"function": "big_orders"}),
            _stage("totals", w["totals"], ["per-country-user"], ("country", "user_id"), sink=_sink(out / "totals")),
            _stage("big", w["big"], ["big-orders"], ("order_id",), sink=_sink(out / "big")),
        ]
    if workload == "deep-chain":  # the stateless chain with a shuffle before every stage, then a running count
        return here, [
            _stage("events", p, [], source=_file_source(data, clicks_as, rows, CLICK_SCHEMA)),
            _stage("tag", p, ["events"], ("user_id",), transform={"function": "tag_events"}),
            _stage("engaged", p, ["tag"], ("event_id",), transform={"function": "engaged_only"}),
            _stage("shape", p, ["engaged"], ("user_id",), transform={"function": "shape"}),
            _stage("per-user", p, ["shape"], aggregate={
                "keyBy": ["user_id"], "aggregations": [{"name": "events", "op": "count"},
                                                       {"name": "eur", "op": "sum", "column": "revenue_eur"}]}),
            _stage("output", p, ["per-user"], ("user_id",), sink=_sink(out / "output")),
        ]
    if workload == "six-stage":
        return here, [
            _stage("orders", p, [], source=_file_source(data, "jsonl", rows, ORDER_SCHEMA)),
            _stage("enrich", p, ["orders"], transform={"function": "enrich_orders"}),
            _stage("per-country-user", p, ["enrich"], aggregate=COUNTRY_USER),
            _stage("big-orders", p, ["enrich"], transform={"function": "big_orders"}),
            _stage("totals", p, ["per-country-user"], sink=_sink(out / "totals")),
            _stage("big", p, ["big-orders"], sink=_sink(out / "big")),
        ]
    assert workload == "stateless", workload
    return here, [
        _stage("events", p, [], source=_file_source(data, clicks_as, rows, CLICK_SCHEMA)),
        _stage("tag", p, ["events"], transform={"function": "tag_events"}),
        _stage("engaged", p, ["tag"], transform={"function": "engaged_only"}),
        _stage("shape", p, ["engaged"], transform={"function": "shape"}),
        _stage("output", p, ["shape"], sink=_sink(out / "output")),
    ]


def pipeline(path: Path, workload: str, data: Path, out: Path, rows: int, steps: int, p: int,
             checkpoint_every: int = 0, clicks_as: str = "parquet") -> Path:
    """Write the FTPipeline file of ``workload`` (``p`` workers, every stage ``p`` channels) to ``path``;
    ``checkpoint_every`` > 0: ftpipeline checkpoints every that many steps (SS writes its state every batch); 0: never."""
    entry, found = stages(workload, data, out, rows, p, clicks_as)
    doc = {"apiVersion": "ftpipeline.io/v1alpha1", "kind": "FTPipeline",
           "metadata": {"name": f"vs-spark-{workload}"},
           "spec": {"image": "ftpipeline:0.1.0", "entryPoint": entry, "workers": p,
                    "deadLetter": {"path": str(out / "_dead-letters")},
                    "steps": {"maxSteps": steps, "trigger": {"records": 1}}, "stages": found}}
    doc["spec"]["checkpoint"] = {"intervalSteps": checkpoint_every, "storage": {"path": str(out / "_checkpoints")}}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def input_kind(workload: str, p: int) -> str:
    """Which input a workload reads, and split over how many source channels (workloads share inputs)."""
    if workload == "many-channels":
        return f"orders-{WIDE['orders']}"
    return f"orders-{p}" if workload == "six-stage" else f"clicks-{p}"


def write_input(workload: str, directory: Path, rows: int, steps: int, p: int, clicks_as: str = "parquet") -> None:
    """The input of ``workload``: one file per (step, source channel)."""
    if workload == "many-channels":
        orders(directory, rows, steps, WIDE["orders"])
    elif workload == "six-stage":
        orders(directory, rows, steps, p)
    else:
        clicks(directory, rows, steps, p, clicks_as)
