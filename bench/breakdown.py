"""Where a step's time goes, on both sides of ``bench/vs_spark.py``, as one table per run.

ftpipeline: its summary's ``phases`` (``ftpipeline/obs/phases.py``): per step, the coordinator's
wall-clock phases (decide, dispatch, tasks, commit, release) and the tasks' work summed over the
step's tasks (read, operator, spark, write, record), with tasks and Spark jobs per step.
Spark Structured Streaming: each query's progress reports, ``durationMs`` per measured batch
(latestOffset, getBatch, queryPlanning, addBatch, walCommit, commitOffsets), summed over its
queries (a pipeline with two sinks is two queries).
"""

from __future__ import annotations

import statistics
from typing import Any

from rich.table import Table

OURS_PHASES = ("decide", "dispatch", "tasks", "commit", "release")
OURS_PARTS = ("read", "operator", "spark", "write", "record")
SS_PHASES = ("latestOffset", "getBatch", "queryPlanning", "addBatch", "walCommit", "commitOffsets")


def ours(summaries: list[dict[str, Any]]) -> dict[str, float]:
    """Mean per step over runs, in ms (tasks and jobs: counts)."""
    out: dict[str, float] = {}
    for name in OURS_PHASES:
        out[name] = 1000 * statistics.mean(s["phases"]["phases"][name] for s in summaries)
    for name in OURS_PARTS:
        out[f"work: {name}"] = 1000 * statistics.mean(s["phases"]["tasks"][name] for s in summaries)
    out["task count"] = statistics.mean(s["phases"]["tasks"]["tasks"] for s in summaries)
    out["Spark jobs"] = statistics.mean(s["phases"]["tasks"]["jobs"] for s in summaries)
    return out


def spark(runs: list[dict[str, list[dict[str, Any]]]], warmup: int) -> dict[str, float]:
    """Mean per measured batch over runs, in ms, each phase summed over the run's queries."""
    out: dict[str, float] = {}
    for name in SS_PHASES:
        per_run = []
        for queries in runs:
            per_query = []
            for reports in queries.values():
                batches = [p for p in reports if p.get("numInputRows", 0) > 0][warmup:]
                per_query.append(statistics.mean(p["durationMs"].get(name, 0) for p in batches) if batches else 0.0)
            per_run.append(sum(per_query))
        out[name] = statistics.mean(per_run)
    return out


def table(rows: list[tuple[str, int, dict[str, float], dict[str, float]]]) -> Table:
    """One row per (workload, size): ours, then SS."""
    t = Table(title="where a step's time goes (means per step; ours: wall ms per phase, then work ms summed "
                    "over the step's tasks; SS: durationMs per batch)")
    t.add_column("workload")
    t.add_column("rows/step", justify="right")
    t.add_column("ftpipeline")
    t.add_column("Spark SS")
    for workload, size, o, s in rows:
        mine = ", ".join(f"{k} {v:,.0f}" for k, v in o.items() if k not in ("task count", "Spark jobs"))
        mine += f"; {o['task count']:.0f} tasks, {o['Spark jobs']:.1f} Spark jobs"
        theirs = ", ".join(f"{k} {v:,.0f}" for k, v in s.items())
        t.add_row(workload, f"{size:,}", mine, theirs)
    return t
