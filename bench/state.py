"""A keyed aggregate's step time as its state grows, ftpipeline beside Spark Structured Streaming.

For each state size N of ``--sizes``, both sides run the same rows
(``state_workload.py``): fill steps that bring the state to N keys, then
``--steps`` steps of ``--touched`` Zipf-skewed rows each. ftpipeline runs
them as a pipeline (generator -> aggregate -> Parquet sink, state backend
``--backend``, a checkpoint every ``--checkpoint-every`` steps); Spark
Structured Streaming runs the same aggregate over the same rows written as
Parquet files (``ss_side.py``), with its RocksDB state store provider.
Printed per size, over the touched steps after ``--warmup``:

- the median step time of each side, and ours ÷ SS;
- ours at N ÷ ours at the smallest N (what a step costs as state grows);
- our checkpoints in the touched phase: bytes written, keys changed since the
  previous one, bytes per changed key (median and mean: a RocksDB
  compaction's output is uploaded by the checkpoint after it);
- with ``--kill``: ours once more with w1 (a per-user channel's holder)
  SIGKILLed between two checkpoints, the time from the kill to the next
  committed step, and whether the output equals the oracle's.

    python bench/state.py                                   # 10k and 1M keys
    python bench/state.py --sizes 10000,1000000,10000000    # the issue's sizes
    python bench/state.py --sizes 50000000 --no-spark       # ours alone
    python bench/state.py --sizes 10000000 --no-spark --kill
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import yaml
from rich.console import Console
from rich.table import Table

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import state_workload  # noqa: E402
import vs_spark_workloads as wl  # noqa: E402

from ftpipeline.dataflow.sources import channel_share  # noqa: E402
from ftpipeline.dataflow.sources.generator import GeneratorReader  # noqa: E402
from ftpipeline.obs.spans import step_spans  # noqa: E402
from ftpipeline.spec.model import GeneratorSource  # noqa: E402

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
P = 2  # channels, workers, Spark cores


def entry_point(directory: Path, keys: int, fill: int, touched: int) -> Path:
    path = directory / "workload.py"
    path.write_text(f"import sys\nsys.path.insert(0, {str(BENCH)!r})\nimport state_workload\n"
                    f"state_rows = state_workload.make({keys}, {fill}, {touched}, {P})\n")
    return path


def document(name: str, entry: Path, source: dict[str, Any], out: Path, steps: int, args: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "image": "ftpipeline:0.1.0", "entryPoint": str(entry), "workers": P,
        "steps": {"maxSteps": steps, "trigger": {"records": 1}},
        "state": {"backend": args.backend},
        "stages": [
            {"name": "events", "parallelism": P, "source": source},
            {"name": "per-user", "parallelism": P, "inputs": [{"stage": "events"}],
             "aggregate": {"keyBy": ["user"], "aggregations": [{"name": "n", "op": "count"},
                                                               {"name": "total", "op": "sum", "column": "amount"}]}},
            {"name": "output", "parallelism": P, "inputs": [{"stage": "per-user"}],
             "sink": {"parquet": {"path": str(out / "output")}}},
        ]}
    spec["checkpoint"] = {"intervalSteps": args.checkpoint_every, "storage": {"path": str(out / "_checkpoints")}}
    return {"apiVersion": "ftpipeline.io/v1alpha1", "kind": "FTPipeline", "metadata": {"name": name}, "spec": spec}


def write_files(directory: Path, entry: Path, steps: int, touched: int, filled: int) -> list[set[str]]:
    """The rows of every step as Parquet files Spark's file source reads in step order; answers the
    distinct keys of each step (none listed for the fill steps)."""
    from ftpipeline.spec.load import load_entry_module

    module = load_entry_module(str(entry), entry.parent)
    reader = GeneratorReader(GeneratorSource("state_rows", touched, 0), module)
    directory.mkdir(parents=True, exist_ok=True)
    keys: list[set[str]] = []
    for step in range(1, steps + 1):
        seen: set[str] = set()
        for c in range(P):
            share = channel_share(touched, P, c)
            table = reader.read(c, step, (step - 1) * share, step * share).table
            path = directory / wl.file_name(step, c, P, "parquet")
            pq.write_table(table, path)
            wl._stamp(path, step)
            if step > filled:
                seen.update(table.column("user").to_pylist())
        keys.append(seen)
    return keys


def run(cmd: list[str], what: str) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=4 * 3600)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-30:])
        raise RuntimeError(f"{what} exited with {done.returncode}:\n{tail}")


def ours(directory: Path, entry: Path, fill: int, steps: int, args: Any, *extra: str) -> dict[str, Any]:
    pipeline = directory / "ours.yaml"
    source = {"generator": {"function": "state_rows", "rowsPerStep": args.touched, "seed": 0}}
    pipeline.write_text(yaml.safe_dump(document("state-bench", entry, source, directory / "out", steps, args)))
    summary_path = directory / "summary.json"
    summary_path.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "ftpipeline.cli", "run", str(pipeline), "--no-progress", "--overwrite",
           "--run-dir", str(directory / "run"), "--summary-json", str(summary_path), *extra]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=4 * 3600)
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    if done.returncode != 0 and "verify" not in summary:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-30:])
        raise RuntimeError(f"ftpipeline run exited with {done.returncode}:\n{tail}")
    spans = step_spans(summary["commit_at"], summary["step_seconds"])
    return {"step_seconds": [end - start for start, end in spans], "checkpoints": summary["checkpoints"],
            "recoveries": summary.get("recoveries", []), "verify": summary.get("verify", [])}


def killed(directory: Path, entry: Path, fill: int, steps: int, at: int, args: Any) -> dict[str, Any]:
    """Ours again, w1 (which holds a per-user channel) SIGKILLed in step ``at``; the output is then
    compared with the oracle (``--verify``: the same rows as one PySpark batch job)."""
    mine = ours(directory, entry, fill, steps, args, "--kill-at-step", str(at), "--kill-after-tasks", "1",
                "--kill-worker", "w1", "--verify")
    [recovery] = mine["recoveries"]
    return {"to_commit_s": recovery["to_commit_seconds"], "rebuilt": recovery["rebuilt"],
            "equal": all(c["equal"] for c in mine["verify"]) and bool(mine["verify"])}


def spark(directory: Path, entry: Path, steps: int, args: Any) -> dict[str, Any]:
    pipeline = directory / "ss.yaml"
    source = {"file": {"path": str(directory / "input"), "format": "parquet", "rowsPerStep": args.touched,
                       "schema": {"user": "string", "amount": "long"}}}
    pipeline.write_text(yaml.safe_dump(document("state-bench-ss", entry, source, directory / "ss-out", steps, args)))
    result = directory / "progress.json"
    run([sys.executable, str(BENCH / "ss_side.py"), str(pipeline), "--work", str(directory / "ss"),
         "--cores", str(P), "--result", str(result), "--conf", f"spark.sql.streaming.stateStore.providerClass={ROCKSDB_PROVIDER}"],
        "Spark Structured Streaming")
    [reports] = json.loads(result.read_text()).values()
    durations: dict[int, float] = {}
    state_rows = 0
    for p in reports:
        if p.get("numInputRows", 0) > 0 and p["batchId"] not in durations:
            durations[p["batchId"]] = p["durationMs"]["triggerExecution"] / 1000
            ops = p.get("stateOperators") or [{}]
            state_rows = int(ops[0].get("numRowsTotal", 0))
    return {"step_seconds": [durations[b] for b in sorted(durations)], "state_rows": state_rows}


def checkpoint_rows(checkpoints: list[dict[str, Any]], keys: list[set[str]], first: int) -> list[tuple[int, int]]:
    """(bytes, keys changed since the previous checkpoint) of each checkpoint past step ``first``."""
    out = []
    previous = None
    for c in sorted(checkpoints, key=lambda c: c["boundary"]):
        boundary = int(c["boundary"])
        if previous is not None and previous >= first:
            changed = set().union(*keys[previous:boundary])
            out.append((int(c["bytes"]), len(changed)))
        previous = boundary
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sizes", default="10000,1000000", help="state sizes (keys), comma separated")
    parser.add_argument("--touched", type=int, default=20_000, help="rows per touched step")
    parser.add_argument("--fill", type=int, default=500_000, help="new keys per fill step")
    parser.add_argument("--steps", type=int, default=30, help="touched steps")
    parser.add_argument("--warmup", type=int, default=5, help="touched steps left out of the medians")
    parser.add_argument("--checkpoint-every", type=int, default=5)
    parser.add_argument("--backend", default="rocksdb", choices=["rocksdb", "memory"])
    parser.add_argument("--no-spark", action="store_true", help="ours alone")
    parser.add_argument("--spark-max", type=int, default=10_000_000, help="largest size run on Spark too")
    parser.add_argument("--kill", action="store_true",
                        help="run ours once more, killing a worker that holds a per-user channel mid-run; "
                             "report the time from the kill to the next commit and whether the output equals the oracle")
    parser.add_argument("--keep", action="store_true", help="keep the work directories")
    args = parser.parse_args()
    console = Console(width=200)
    rows = []
    for size in [int(s) for s in args.sizes.split(",")]:
        fill = min(args.fill, size)
        filled = state_workload.fill_steps(size, fill)
        steps = filled + args.steps
        first = filled + args.warmup  # the first measured step is first + 1
        directory = Path(tempfile.mkdtemp(prefix=f"state-{size}-"))
        try:
            entry = entry_point(directory, size, fill, args.touched)
            console.print(f"[bold]{size:,d} keys[/bold]: {filled} fill steps, {args.steps} touched steps")
            keys = write_files(directory / "input", entry, steps, args.touched, filled)
            touched = statistics.median(len(k) for k in keys[first:])
            mine = ours(directory, entry, fill, steps, args)
            ours_step = statistics.median(mine["step_seconds"][first:])
            theirs = None
            if not args.no_spark and size <= args.spark_max:
                ss = spark(directory, entry, steps, args)
                theirs = statistics.median(ss["step_seconds"][first:])
                console.print(f"  Spark SS: {len(ss['step_seconds'])} batches, {ss['state_rows']:,d} keys in its state")
            ckpts = checkpoint_rows(mine["checkpoints"], keys, first - args.warmup)
            rows.append({"keys": size, "touched_keys": touched, "ours_s": ours_step, "ss_s": theirs,
                         "ckpt_bytes": [b for b, _ in ckpts], "ckpt_changed": [c for _, c in ckpts]})
            console.print(f"  ours {ours_step * 1000:.0f} ms/step" + (f", SS {theirs * 1000:.0f} ms/step" if theirs else ""))
            if args.kill:
                at = filled + args.steps // 2 + 2  # between two checkpoints: the rebuild replays steps
                rows[-1]["kill"] = killed(directory, entry, fill, steps, at, args)
                console.print(f"  w1 killed in step {at}: {rows[-1]['kill']}")
        finally:
            if not args.keep:
                shutil.rmtree(directory, ignore_errors=True)
    report(rows, args, console)


def report(rows: list[dict[str, Any]], args: Any, console: Console) -> None:
    table = Table(title=f"keyed aggregate, {args.touched:,d} rows per step, {args.backend} backend")
    for col in ("keys", "touched keys/step", "ours ms/step", "SS (RocksDB) ms/step", "ours ÷ SS",
                f"ours ÷ ours@{rows[0]['keys']:,d}", "ckpt MB (median/mean)", "changed keys/ckpt",
                "bytes/changed key (median/mean)"):
        table.add_column(col, justify="right")
    for r in rows:
        b, c = r["ckpt_bytes"], r["ckpt_changed"]
        per = [x / max(y, 1) for x, y in zip(b, c)]
        table.add_row(
            f"{r['keys']:,d}", f"{r['touched_keys']:,.0f}", f"{r['ours_s'] * 1000:.0f}",
            f"{r['ss_s'] * 1000:.0f}" if r["ss_s"] else "-",
            f"{r['ours_s'] / r['ss_s']:.2f}" if r["ss_s"] else "-",
            f"{r['ours_s'] / rows[0]['ours_s']:.2f}",
            f"{statistics.median(b) / 1e6:.1f} / {np.mean(b) / 1e6:.1f}" if b else "-",
            f"{statistics.median(c):,.0f}" if c else "-",
            f"{statistics.median(per):.0f} / {np.mean(b) / max(np.mean(c), 1):.0f}" if b else "-")
    console.print(table)
    for r in rows:
        if "kill" in r:
            k = r["kill"]
            console.print(f"{r['keys']:,d} keys, a worker killed: next commit {k['to_commit_s']:.2f} s after the kill, "
                          f"rebuilt {', '.join(k['rebuilt']) or 'nothing'}, output {'equal to' if k['equal'] else 'DIFFERENT from'} the oracle")
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
