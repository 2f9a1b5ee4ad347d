"""What a drain costs against a crash: the same worker evicted (SIGTERM: it hands its channels over) or killed
(SIGKILL: recovered), at the same step of the same run, side by side in one run of this script.

Each pair runs the example through the real CLI twice, alternating which goes
first: ``--fault evict`` and ``--fault kill`` on worker w1 at step ``--at``.
Printed per run and as medians: the steady rows/s of the whole run (the first
``--warmup`` steps excluded), the longest wait between two commits from the
fault on (what the fault stalled the pipeline for), the same wait in the
run's other steps (the baseline), and the rows read again (recovery's
re-run tasks or replayed steps; an evacuation reads none).

    python bench/evacuation.py [--pairs 3] [--steps 40] [--at 15] [--rows 30000] [--shape wide]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from ftpipeline.obs.spans import busy_seconds, step_spans

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from object_storage import pipeline  # noqa: E402  (the example, or the wide shape, at a location)


def one(path: Path, directory: Path, fault: str, at: int, warmup: int) -> dict[str, float]:
    summary = directory / f"summary-{fault}.json"
    subprocess.run(
        [sys.executable, "-m", "ftpipeline.cli", "run", str(path), "--no-progress", "--overwrite",
         "--run-dir", str(directory / f"run-{fault}"), "--summary-json", str(summary),
         "--kill-at-step", str(at), "--kill-worker", "w1", "--fault", fault],
        check=True, capture_output=True)
    data = json.loads(summary.read_text())
    spans = step_spans(data["commit_at"], data["step_seconds"])[warmup:]
    rate = data["source_rows"] / data["committed"] * len(spans) / busy_seconds(spans)
    commits = data["commit_at"]  # seconds from the start, in commit order (a rollback's steps commit again)
    gaps = [b - a for a, b in zip(commits, commits[1:])]
    fault_at = at - 2  # the gap ending at the first commit after step at-1's
    return {"rate": rate, "stall": max(gaps[fault_at:]), "baseline": statistics.median(gaps[warmup:fault_at] or gaps),
            "reread": float(data["stats"].get("recomputed_rows", 0)), "recoveries": float(len(data["recoveries"])),
            "evacuations": float(len(data.get("evacuations", [])))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--at", type=int, default=15)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--rows", type=int, default=30000)
    parser.add_argument("--shape", choices=["clickstream", "wide"], default="clickstream")
    args = parser.parse_args()
    results: dict[str, list[dict[str, float]]] = {"evict": [], "kill": []}
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        run = 0
        for i in range(args.pairs):
            for fault in (("evict", "kill") if i % 2 == 0 else ("kill", "evict")):
                run += 1
                r = one(pipeline(d, str(d / "data"), args.shape, args.steps, args.rows, run), d, fault, args.at,
                        args.warmup)
                results[fault].append(r)
                print(f"pair {i + 1}: {fault:5} {r['rate']:>10,.0f} rows/s, stall {r['stall']:.2f} s (steps "
                      f"commit every {r['baseline']:.2f} s otherwise), {r['reread']:,.0f} rows read again, "
                      f"{r['recoveries']:.0f} recoveries, {r['evacuations']:.0f} evacuations", flush=True)
    print()
    print(f"shape {args.shape}: {args.steps} steps of {args.rows:,} rows, worker w1 evicted or killed at step "
          f"{args.at}, checkpoints every 5 steps (medians of {args.pairs} runs each)")
    print(f"{'':8}{'rows/s':>12}{'stall s':>10}{'step s':>9}{'rows read again':>17}")
    for fault, rs in results.items():
        med = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
        print(f"{fault:8}{med['rate']:>12,.0f}{med['stall']:>10.2f}{med['baseline']:>9.2f}{med['reread']:>17,.0f}")
    ratio = [e["stall"] / k["stall"] for e, k in zip(results["evict"], results["kill"])]
    print(f"stall evict/kill: {statistics.median(ratio):.2f} (median of pairs)")


if __name__ == "__main__":
    main()
