"""Joins and keyed functions: ftpipeline vs Spark Structured Streaming (SS), the same jobs, one run.

Why: a join of two streams is where state is largest and most churned (both sides buffered, evicted by
the watermark), and a keyed function with timers is where state and timers are the user's own; this prints
what a step costs, what the state costs to keep and how fast each is back after a crash, for both,
measured side by side and alternating (drift in the machine's load hits both alike), as ratios ours ÷ SS.

    python bench/joins.py [--jobs join process] [--sizes 10000] [--steps 30] [--warmup 5] [--pairs 3]
                          [--kills 2] [--kill-step 8] [--keys 50000] [--within 30] [--gap 10] [--span 2]
                          [--json FILE]
    python bench/joins.py --quick                         # tiny sizes, few steps: does every path run?

Input: per step and source one Parquet file of ``--sizes`` rows, ``--span`` seconds of event time a step,
ads drawn from ``--keys``; each source's watermark 5 s behind its largest event time.

* ``join``: ad impressions ``{ad, campaign, ts}`` joined with clicks ``{ad, cost, ts}`` on ``ad`` where the
  click is 0 to ``--within`` seconds after the impression (inner), -> Parquet. SS
  (``bench/ss_joins_side.py``): the same document translated to a stream-stream join with the time-range
  condition and watermarks on both sides.
* ``process``: a keyed function over the clicks, keyed on ``ad``, that emits an ad's count once it has had
  no click for ``--gap`` seconds of event time: its rows' times in list state, an event-time timer
  ``--gap`` after each; the timer finding the newest row up to it exactly ``--gap`` old emits and forgets
  those rows (``ENTRY`` below: it decides on event time alone, so it emits the same whether a step's
  timers fire before its rows, as here and in Flink, or after them, as in SS). SS
  (``bench/ss_process_side.py``): the same class as ``transformWithStateInPandas`` (it needs pandas and
  protobuf: ``pip install -e '.[bench]'``).

ftpipeline: two workers of ``local[1]``, every stage two channels, RocksDB state, a checkpoint every
``--checkpoint-every`` steps (1: SS keeps its state every batch). SS: ``local[2]``, two shuffle partitions,
the RocksDB state store, ``maxFilesPerTrigger`` 1 per source (one step per micro-batch).

1. throughput: rows of the inputs in the steps after ``--warmup`` over the time those steps cover (the
   union of their spans, as in ``bench/vs_spark.py``); both sides' outputs must hold as many rows;
2. state: what a restore of the newest checkpoint reads (as ``bench/windows.py`` counts it);
3. kill -> next commit: ftpipeline loses a worker mid-step ``--kill-step`` (the summary's recovery
   ``to_commit_seconds``); SS's driver is SIGKILLed once batch ``--kill-step`` is committed, restarted on
   its checkpoint, and timed to its next committed batch.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import yaml
from rich.console import Console
from rich.table import Table

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import vs_spark as vs  # noqa: E402
import windows as win  # noqa: E402

from ftpipeline.obs.spans import busy_seconds, step_spans  # noqa: E402

SS_SIDE = {"join": BENCH / "ss_joins_side.py", "process": BENCH / "ss_process_side.py"}
INPUTS = {"join": 2, "process": 1}  # sources a job reads
SIDES = ("ours", "spark")
EPOCH_MS = 1_767_225_600_000


def write_input(data: Path, size: int, steps: int, args: argparse.Namespace) -> None:
    for name in ("impressions", "clicks"):
        (data / name).mkdir(parents=True, exist_ok=True)
    for step in range(1, steps + 1):
        rng = np.random.default_rng(step)
        base = EPOCH_MS + (step - 1) * args.span * 1000
        ts = np.sort(base + rng.integers(0, args.span * 1000, size))
        pq.write_table(pa.table({"ad": rng.integers(0, args.keys, size), "campaign": rng.integers(0, 50, size),
                                 "ts": ts}), data / "impressions" / f"s{step:05d}.parquet")
        clicked = np.sort(base + rng.integers(0, args.span * 1000, size))
        pq.write_table(pa.table({"ad": rng.integers(0, args.keys, size), "cost": rng.integers(1, 100, size),
                                 "ts": clicked}), data / "clicks" / f"s{step:05d}.parquet")


ENTRY = '''"""The keyed function of bench/joins.py: per key the event times of its rows (list state) and an event-time
timer GAP_MS after each; a timer T finds the key quiet when the newest row at or before T is exactly GAP_MS
older, and emits the count of rows up to it. It decides on event time alone, so it emits the same whether a
step's timers fire before its rows (ftpipeline, as Flink) or after them (Spark's transformWithState)."""

GAP_MS = {gap_ms}


class IdleKeys:
    def process(self, key, rows, ctx):
        times = rows.column("ts").to_pylist()
        ctx.list("times").extend(times)
        for t in set(times):
            ctx.timers.register_event_time(t + GAP_MS)  # ms, as the rows' ts

    def on_timer(self, key, timer, ctx):
        due = timer.time
        held = ctx.list("times")
        times = held.get()
        if max((t for t in times if t <= due), default=None) != due - GAP_MS:
            return None  # a row came within GAP_MS: a later timer decides
        rest = [t for t in times if t > due - GAP_MS]
        if rest:
            held.update(rest)
        else:
            held.clear()
        return [{{"key": key[0], "rows": len(times) - len(rest), "newest": due - GAP_MS}}]
'''


def pipeline(work: Path, data: Path, steps: int, args: argparse.Namespace) -> Path:
    def source(name: str) -> dict[str, Any]:
        return {"name": name,
                "source": {"file": {"path": str(data / name), "format": "parquet", "rowsPerStep": args.size},
                           "eventTime": {"column": "ts", "watermark": {"maxOutOfOrderness": "5s"}}}}

    if args.job == "join":
        stages = [source("impressions"), source("clicks"),
                  {"name": "clicked", "parallelism": 2, "inputs": [{"stage": "impressions"}, {"stage": "clicks"}],
                   "join": {"keys": ["ad"], "within": {"lower": "0s", "upper": f"{args.within}s"}}}]
        (work / "entry.py").write_text('"""No functions."""\n')
    else:
        stages = [source("clicks"),
                  {"name": "idle", "parallelism": 2, "inputs": [{"stage": "clicks"}],
                   "process": {"class": "IdleKeys", "keys": ["ad"],
                               "output": {"key": "long", "rows": "long", "newest": "long"}}}]
        (work / "entry.py").write_text(ENTRY.format(gap_ms=args.gap * 1000))
    doc = {"apiVersion": "ftpipeline.io/v1alpha1", "kind": "FTPipeline", "metadata": {"name": f"bench-{args.job}"},
           "spec": {"entryPoint": str(work / "entry.py"), "workers": 2, "steps": {"maxSteps": steps},
                    "checkpoint": {"intervalSteps": args.checkpoint_every,
                                   "storage": {"path": str(work / "checkpoints")}},
                    "deadLetter": {"path": str(work / "dead-letters")},
                    "stages": [*stages, {"name": "out", "parallelism": 2, "inputs": [{"stage": stages[-1]["name"]}],
                                         "sink": {"parquet": {"path": str(work / "out" / "out")}}}]}}
    path = work / "pipeline.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def bounded(tmp: Path, data: Path, side: str, name: str, steps: int, args: argparse.Namespace) -> Path:
    """A fresh work directory with the first ``steps`` steps' files (SS reads whatever a directory holds)."""
    work = vs.fresh(tmp / f"{name}-{side}")
    part = work / "in"
    for source in ("impressions", "clicks"):
        (part / source).mkdir(parents=True)
        for path in sorted((data / source).iterdir())[:steps]:
            (part / source / path.name).hardlink_to(path)
    return pipeline(work, part, steps, args)


def rows(directory: Path) -> int:
    return ds.dataset(directory, format="parquet").count_rows() if directory.is_dir() else 0


def ss_command(pipeline_file: Path, work: Path, args: argparse.Namespace, *extra: str) -> list[str]:
    job = ["--gap-ms", str(args.gap * 1000)] if args.job == "process" else []
    return [sys.executable, str(SS_SIDE[args.job]), str(pipeline_file), "--work", str(work), "--cores", "2", *job,
            *extra]


def throughput(side: str, pipeline_file: Path, args: argparse.Namespace) -> tuple[float, int, int]:
    """(rows/s of both inputs over the measured steps, output rows, newest checkpoint bytes)."""
    work = pipeline_file.parent
    if side == "ours":
        vs.command(vs.ours_command(pipeline_file, work), "ftpipeline run")
        summary = json.loads((work / "summary.json").read_text())
        spans = step_spans(summary["commit_at"], summary["step_seconds"])[args.warmup:]
        newest = win.ours_newest_bytes(work / "checkpoints")
    else:
        result = work / "progress.json"
        vs.command(ss_command(pipeline_file, work, args, "--result", str(result)), "Spark Structured Streaming")
        batches = vs.batches(json.loads(result.read_text()))
        spans = [batches[i] for i in sorted(batches)[args.warmup:]]
        newest = win.spark_newest_bytes(work / "checkpoint" / "state")
    return INPUTS[args.job] * args.size * len(spans) / busy_seconds(spans), rows(work / "out" / "out"), newest


def kill(side: str, pipeline_file: Path, seed: int, args: argparse.Namespace) -> float:
    work = pipeline_file.parent
    if side == "ours":
        return vs.ours_recovery(pipeline_file, work, args.kill_step, seed)
    return vs.killed_and_restarted(ss_command(pipeline_file, work, args), work / "checkpoint" / "commits",
                                   args.kill_step)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--jobs", nargs="+", choices=sorted(SS_SIDE), default=["join", "process"])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000], help="rows a step of each input")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--kills", type=int, default=2)
    parser.add_argument("--kill-step", type=int, default=8)
    parser.add_argument("--keys", type=int, default=50_000, help="distinct ads")
    parser.add_argument("--within", type=int, default=30, help="seconds a click may follow its impression")
    parser.add_argument("--gap", type=int, default=10, help="seconds of quiet after which a key's count is emitted")
    parser.add_argument("--span", type=int, default=2, help="seconds of event time a step")
    parser.add_argument("--checkpoint-every", type=int, default=1)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.sizes, args.steps, args.warmup, args.pairs, args.kills, args.kill_step = [500], 8, 2, 1, 1, 4
        args.gap = 3  # timers that fire within the few steps
    console = Console()
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-joins-") as scratch:
        tmp = Path(scratch)
        for job, size in [(j, n) for j in args.jobs for n in args.sizes]:
            args.job, args.size = job, size
            data = vs.fresh(tmp / f"in-{job}-{size}")
            steps = max(args.steps, args.kill_step + 3)
            write_input(data, size, steps, args)
            got: dict[str, dict[str, list[float]]] = {s: {"rate": [], "rows": [], "state": [], "kill": []}
                                                      for s in SIDES}
            for pair in range(args.pairs):
                for side in SIDES if pair % 2 == 0 else SIDES[::-1]:
                    rate, out, newest = throughput(side, bounded(tmp, data, side, "t", args.steps, args), args)
                    for key, value in (("rate", rate), ("rows", out), ("state", newest)):
                        got[side][key].append(value)
                    console.print(f"{job}, {size:,} rows/step, pair {pair + 1}, {side:5}: {rate:>10,.0f} rows/s, "
                                  f"{out:,} rows out, newest checkpoint {newest:,} B")
            for k in range(args.kills):
                for side in SIDES if k % 2 == 0 else SIDES[::-1]:
                    took = kill(side, bounded(tmp, data, side, "k", args.kill_step + 3, args), k, args)
                    got[side]["kill"].append(took)
                    console.print(f"{job}, {size:,} rows/step, kill {k + 1}, {side:5}: {took:.2f} s to the next commit")
            med = {s: {k: statistics.median(v) if v else float("nan") for k, v in got[s].items()} for s in SIDES}
            results.append({"job": job, "size": size, "sides": got, "median": med,
                            "same_rows": got["ours"]["rows"] == got["spark"]["rows"],
                            "throughput_ratio": med["ours"]["rate"] / med["spark"]["rate"],
                            "state_ratio": med["ours"]["state"] / med["spark"]["state"] if med["spark"]["state"]
                            else float("nan"),
                            "kill_ratio": med["ours"]["kill"] / med["spark"]["kill"] if got["spark"]["kill"]
                            else float("nan")})
    table = Table(title="joins and keyed functions: ftpipeline ÷ Spark Structured Streaming (medians)")
    for column in ("job", "rows/step", "ours rows/s", "SS rows/s", "throughput ÷", "state ÷", "kill -> commit ÷",
                   "same rows out"):
        table.add_column(column, justify="right")
    for r in results:
        m = r["median"]
        table.add_row(r["job"], f"{r['size']:,}", f"{m['ours']['rate']:,.0f}", f"{m['spark']['rate']:,.0f}",
                      f"{r['throughput_ratio']:.2f}", f"{r['state_ratio']:.2f}", f"{r['kill_ratio']:.3f}",
                      "yes" if r["same_rows"] else "NO")
    console.print(table)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, default=float))


if __name__ == "__main__":
    main()
