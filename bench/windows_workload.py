"""The input and the FTPipeline document of ``bench/windows.py``: page views counted per page and
event-time window.

Input is written once per step size, as one Parquet file per (step, source channel), named and
stamped as ``vs_spark_workloads`` names them (ftpipeline's file source reads step k's files in
step k, Spark's with ``maxFilesPerTrigger`` = parallelism in micro-batch k). A view is
``{user, page, ts, dwell_ms}``, ``ts`` in milliseconds since the epoch. Step k covers
``[E0 + (k-1) * span, E0 + k * span)`` of event time (``span``: the step's seconds of event time),
shuffled within the step, and a fifth of the views lag by up to ``lag_s`` more (5 s unless told): out of
order, but no view is ever late on either side as long as span + lag <= the watermark's delay
(``bench/windows.py`` insists): a watermark is at most the largest event time read before less
the delay, below every event time of step k even when step k's files are read a step apart.
Pages are Zipf-skewed over ``pages`` pages, users over 100k.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from ftpipeline.dataflow.sources import channel_share

import vs_spark_workloads as wl

ROOT = Path(__file__).resolve().parents[1]
ENTRY = ROOT / "examples" / "page-views" / "pages.py"  # no user functions: the window is declared
E0_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z, on a minute
SCHEMA = {"user": "string", "page": "string", "ts": "long", "dwell_ms": "long"}
ARROW = pa.schema([("user", pa.string()), ("page", pa.string()), ("ts", pa.int64()), ("dwell_ms", pa.int64())])
SINK = "windows"


@dataclass(frozen=True)
class Job:
    """The windowed job's parameters, the same on both sides."""

    window_s: float     # tumbling window size
    delay_s: float      # the watermark's max out-of-orderness
    span_s: float       # event time a step covers (the live feed releases a step every span_s of wall time)
    pages: int
    parallelism: int
    lag_s: float = 5.0  # a fifth of the views are up to this much older than their step's span


def duration(seconds: float) -> str:
    """An FTPipeline duration: a whole number and a unit."""
    ms = round(seconds * 1000)
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


def views(rng: np.random.Generator, n: int, lo_ms: int, span_ms: int, lag_ms: int, pages: int) -> pa.Table:
    ts = lo_ms + rng.integers(0, span_ms, n) - np.where(rng.random(n) < 0.2, rng.integers(0, max(lag_ms, 1), n), 0)
    page = rng.zipf(1.3, n) % pages
    user = rng.zipf(1.2, n) % 100_000
    return pa.table({"user": pa.array([f"u{u}" for u in user]), "page": pa.array([f"/p/{p}" for p in page]),
                     "ts": pa.array(ts, pa.int64()), "dwell_ms": pa.array(rng.integers(100, 60_000, n), pa.int64())},
                    schema=ARROW)


def write_input(directory: Path, rows: int, steps: int, job: Job) -> list[int]:
    """``steps`` steps of ``rows`` views as files; answers the largest event time (ms) of each step."""
    directory.mkdir(parents=True, exist_ok=True)
    span_ms = round(job.span_s * 1000)
    largest = []
    for step in range(1, steps + 1):
        top = 0
        for c in range(job.parallelism):
            table = views(np.random.default_rng([41, step, c]), channel_share(rows, job.parallelism, c),
                          E0_MS + (step - 1) * span_ms, span_ms, round(job.lag_s * 1000), job.pages)
            path = directory / wl.file_name(step, c, job.parallelism, "parquet")
            pq.write_table(table, path)
            wl._stamp(path, step)
            top = max(top, int(np.max(table.column("ts").to_numpy())) if table.num_rows else 0)
        largest.append(top)
    return largest


def pipeline(path: Path, data: Path, work: Path, rows: int, job: Job, steps: int | None, follow: bool,
             checkpoint_every: int) -> Path:
    """The FTPipeline file of the job: ``data`` -> 1 tumbling window per page (count, avg dwell) -> Parquet in
    ``work/out/windows``; ``steps`` None: no step limit (a bounded input then ends with the end-of-input step)."""
    p = job.parallelism
    source: dict[str, Any] = {"file": {"path": str(data), "format": "parquet", "rowsPerStep": rows,
                                       "schema": dict(SCHEMA), **({"follow": True} if follow else {})},
                              "eventTime": {"column": "ts", "watermark": {"maxOutOfOrderness": duration(job.delay_s)}}}
    stages = [
        {"name": "views", "parallelism": p, "source": source},
        {"name": "per-window", "parallelism": p, "inputs": [{"stage": "views"}], "aggregate": {
            "keyBy": ["page"],
            "window": {"tumbling": {"size": duration(job.window_s)}, "emit": "append"},
            "aggregations": [{"name": "views", "op": "count"},
                             {"name": "avg_dwell_ms", "op": "avg", "column": "dwell_ms"}]}},
        {"name": SINK, "parallelism": p, "inputs": [{"stage": "per-window"}],
         "sink": {"parquet": {"path": str(work / "out" / SINK)}}},
    ]
    spec: dict[str, Any] = {"image": "ftpipeline:0.1.0", "entryPoint": str(ENTRY), "workers": p,
                            "deadLetter": {"path": str(work / "out" / "_dead-letters")},
                            "steps": {"trigger": {"records": 1}, **({"maxSteps": steps} if steps else {})},
                            "checkpoint": {"intervalSteps": checkpoint_every,
                                           "storage": {"path": str(work / "checkpoints")}},
                            "stages": stages}
    doc = {"apiVersion": "ftpipeline.io/v1alpha1", "kind": "FTPipeline", "metadata": {"name": "bench-windows"},
           "spec": spec}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path
