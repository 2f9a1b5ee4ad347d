"""How much a recovery re-reads against how much the loss destroyed.

A worker is SIGKILLed at a seeded random step of the clickstream example run
with its default settings (a checkpoint every 10 steps). Two figures per run:

- **lost work** (``lineage/lost.py``, taken from the tables when the loss is
  planned, without looking at the plan): the rows read by every task of the
  lost worker's channels of a step after the newest committed checkpoint that
  wrote an object, plus the rows its pending tasks will read. That is what the
  worker did or had to do that nothing durable holds;
- **recomputed**: the rows the recovery's tasks really read, counted by the
  workers (``recomputed_rows``).

Their ratio is the recovery's overhead over the minimum: lineage recovery
(the default) should re-read about the lost work (target: at most 1.1 times
it); a checkpoint rollback, run beside it on the same kills for comparison,
re-reads every worker's steps since the cut. Runs alternate between the two
strategies, kill for kill.

    python bench/recompute.py [--runs 4] [--steps 40] [--rows 30000] [--seed 1]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "clickstream"
TARGET = 1.1


def pipeline(directory: Path, name: str, steps: int, rows: int, strategy: str) -> Path:
    """The example as it ships (default checkpoints), ``steps`` long, writing under ``directory``."""
    doc = yaml.safe_load((EXAMPLE / "pipeline.yaml").read_text())
    doc["metadata"]["name"] = name
    s = doc["spec"]
    s["entryPoint"] = str(EXAMPLE / "clickstream.py")
    s["steps"]["maxSteps"] = steps
    s["recovery"] = {"strategy": strategy}
    s["checkpoint"] = {"storage": {"path": str(directory / "checkpoints")}}  # the default interval
    for stage in s["stages"]:
        if "source" in stage:
            stage["source"]["generator"]["rowsPerStep"] = rows
        if "sink" in stage:
            stage["sink"]["parquet"]["path"] = str(directory / "out")
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def run(directory: Path, strategy: str, steps: int, rows: int, kill_step: int, worker: str) -> dict[str, Any]:
    directory.mkdir(parents=True)
    path = pipeline(directory, f"recompute-{strategy}", steps, rows, strategy)
    summary = directory / "summary.json"
    done = subprocess.run([sys.executable, "-m", "ftpipeline.cli", "run", str(path), "--no-progress", "--verify",
                           "--run-dir", str(directory / "run"), "--summary-json", str(summary),
                           "--kill-at-step", str(kill_step), "--kill-worker", worker],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{strategy} run failed:\n{done.stdout[-3000:]}")
    s = json.loads(summary.read_text())
    [recovery] = s["recoveries"]
    lost, recomputed = int(recovery["lost_rows"]), int(s["stats"]["recomputed_rows"])
    return {"strategy": strategy, "kill_step": kill_step, "worker": worker, "lost": lost,
            "recomputed": recomputed, "ratio": recomputed / lost if lost else float("inf"),
            "equal": all(c["equal"] for c in s.get("verify", [])),
            "to_commit": recovery.get("to_commit_seconds")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=4, help="kills (each run with both strategies)")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--rows", type=int, default=30000, help="source rows per step")
    parser.add_argument("--workers", type=int, default=3, help="the example's workers")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", type=Path, help="also write the rows as JSON here")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="ftp-recompute-") as tmp:
        for i in range(args.runs):
            kill_step = rng.randint(12, args.steps - 4)  # after the first checkpoint, before the end
            worker = f"w{rng.randrange(args.workers)}"
            order = ("lineage", "checkpoint") if i % 2 == 0 else ("checkpoint", "lineage")
            for strategy in order:
                r = run(Path(tmp) / f"{i}-{strategy}", strategy, args.steps, args.rows, kill_step, worker)
                rows.append(r)
                print(f"  kill {worker} at step {kill_step:>3}  {strategy:10}  lost {r['lost']:>9,} rows  "
                      f"recomputed {r['recomputed']:>9,}  ratio {r['ratio']:.2f}  output equal: {r['equal']}",
                      flush=True)
    print()
    print(f"{'strategy':12}{'median ratio':>14}{'max ratio':>11}{'median lost':>13}{'median recomputed':>19}")
    for strategy in ("lineage", "checkpoint"):
        mine = [r for r in rows if r["strategy"] == strategy]
        print(f"{strategy:12}{statistics.median(r['ratio'] for r in mine):>14.2f}{max(r['ratio'] for r in mine):>11.2f}"
              f"{statistics.median(r['lost'] for r in mine):>13,.0f}{statistics.median(r['recomputed'] for r in mine):>19,.0f}")
    lineage = max(r["ratio"] for r in rows if r["strategy"] == "lineage")
    print(f"\nlineage recompute / lost work, worst of {args.runs} kills: {lineage:.2f} "
          f"(target <= {TARGET}: {'yes' if lineage <= TARGET else 'no'}); every output equal to the oracle: "
          f"{'yes' if all(r['equal'] for r in rows) else 'no'}")
    print(f"({args.steps} steps of {args.rows:,} rows, {args.workers} workers, default checkpoints, seed {args.seed})")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
