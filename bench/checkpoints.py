"""Checkpoints and pipelining, measured side by side in one run.

Three comparisons on the clickstream example, each pair alternated so drift in
the machine's load hits both sides:

1. recovery after one worker loss (the worker holding a stateful channel is
   killed mid-step; checkpoints every 5 steps): lineage vs checkpoint
   strategy — rows recomputed and time from the loss to the next committed step;
2. throughput, lockstep vs pipelined (window 3), no checkpoints;
3. throughput, lockstep with a checkpoint every 10 steps vs none.

Throughput is source rows per second between the commit of the warm-up's
last step and the last commit.

    python bench/checkpoints.py [--pairs 2] [--steps 24] [--rows 30000]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "clickstream"
WARMUP = 5


def pipeline(directory: Path, name: str, steps: int, rows: int, **spec: Any) -> Path:
    doc = yaml.safe_load((EXAMPLE / "pipeline.yaml").read_text())
    doc["metadata"]["name"] = name
    s = doc["spec"]
    s["entryPoint"] = str(EXAMPLE / "clickstream.py")
    s["steps"]["maxSteps"] = steps
    for stage in s["stages"]:
        if "source" in stage:
            stage["source"]["generator"]["rowsPerStep"] = rows
        if "sink" in stage:
            stage["sink"]["parquet"]["path"] = str(directory / name / "out")
    if spec.get("mode"):
        s["steps"]["mode"] = spec["mode"]
        s["steps"]["window"] = spec.get("window", 3)
    s["checkpoint"] = {"intervalSteps": spec.get("checkpoint_every", 0),  # 0: none (the default is every 10)
                       "storage": {"path": str(directory / name / "ckpt")}}
    if spec.get("strategy"):
        s["recovery"] = {"strategy": spec["strategy"]}
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def run(path: Path, directory: Path, *args: str) -> dict[str, Any]:
    summary = directory / "summary.json"
    subprocess.run([sys.executable, "-m", "ftpipeline.cli", "run", str(path), "--no-progress", "--overwrite",
                    "--run-dir", str(directory / "run"), "--summary-json", str(summary), *args],
                   check=True, capture_output=True)
    return dict(json.loads(summary.read_text()))


def throughput(summary: dict[str, Any], rows: int) -> float:
    at = summary["commit_at"]
    return rows * (len(at) - WARMUP) / (at[-1] - at[WARMUP - 1])


def alternate(pairs: int, a: Any, b: Any) -> tuple[list[Any], list[Any]]:
    left: list[Any] = []
    right: list[Any] = []
    for i in range(pairs):
        order = ((a, left), (b, right)) if i % 2 == 0 else ((b, right), (a, left))
        for fn, out in order:
            out.append(fn())
    return left, right


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--rows", type=int, default=30000)
    args = parser.parse_args()
    med = statistics.median
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)

        def recovery(strategy: str) -> dict[str, Any]:
            s = run(pipeline(d, f"rec-{strategy}", args.steps, args.rows, checkpoint_every=5, strategy=strategy), d,
                    "--kill-at-step", str(args.steps // 2 + 1), "--kill-after-tasks", "4", "--kill-worker", "w0")
            r = s["recoveries"][0]
            print(f"  {strategy:10} recomputed {s['stats']['recomputed_rows']:>9,} rows, next commit after "
                  f"{r['to_commit_seconds']:.2f} s", flush=True)
            return {"rows": s["stats"]["recomputed_rows"], "seconds": r["to_commit_seconds"]}

        print("1. recovery after losing the worker with a stateful channel (checkpoints every 5 steps)")
        lin, ck = alternate(args.pairs, lambda: recovery("lineage"), lambda: recovery("checkpoint"))

        def tput(name: str, **spec: Any) -> float:
            t = throughput(run(pipeline(d, name, args.steps, args.rows, **spec), d), args.rows)
            print(f"  {name:22} {t:>10,.0f} rows/s", flush=True)
            return t

        print("2. lockstep vs pipelined (window 3)")
        lock, pipe = alternate(args.pairs, lambda: tput("lockstep"), lambda: tput("pipelined", mode="pipelined"))
        print("3. checkpoints every 10 steps vs none (lockstep)")
        with_ck, without = alternate(args.pairs, lambda: tput("checkpoint-every-10", checkpoint_every=10),
                                     lambda: tput("no-checkpoints"))
    print()
    print(f"{'recovery':36}{'rows recomputed':>18}{'to next commit (s)':>22}")
    for name, xs in (("lineage", lin), ("checkpoint", ck)):
        print(f"{name:36}{med([x['rows'] for x in xs]):>18,.0f}{med([x['seconds'] for x in xs]):>22.2f}")
    print(f"ratio checkpoint/lineage: rows {med([x['rows'] for x in ck]) / med([x['rows'] for x in lin]):.2f}, "
          f"time {med([x['seconds'] for x in ck]) / med([x['seconds'] for x in lin]):.2f}")
    print(f"{'throughput (rows/s, median)':36}")
    print(f"{'lockstep':36}{med(lock):>18,.0f}")
    print(f"{'pipelined (window 3)':36}{med(pipe):>18,.0f}   ratio pipelined/lockstep {med(pipe) / med(lock):.3f}")
    print(f"{'checkpoint every 10 steps':36}{med(with_ck):>18,.0f}")
    print(f"{'no checkpoints':36}{med(without):>18,.0f}   ratio with/without {med(with_ck) / med(without):.3f}")
    print(f"({args.pairs} alternating pairs, {args.steps} steps of {args.rows:,} rows, first {WARMUP} steps excluded)")


if __name__ == "__main__":
    main()
