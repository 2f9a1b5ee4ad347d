"""ftpipeline vs Spark Structured Streaming (SS): the same input, the same user functions, one run.

Why: ftpipeline's claim is exactly-once output and cheap recovery *without* giving up what plain
Spark streaming does per micro-batch; this prints how its throughput, step latency and recovery
time compare with SS's on identical work, measured side by side, alternating the two (so drift
in the machine's load hits both alike).

    python bench/vs_spark.py [--workloads aggregate six-stage stateless many-channels deep-chain] [--sizes 5000 50000]
                             [--steps 20] [--warmup 3] [--pairs 2] [--parallelism 2] [--json FILE]
                             [--ours-args=--no-chaining] [--ss-java-options=OPTS]
    python bench/vs_spark.py --recovery [--kill worker|coordinator] [--kills 5] [--kill-step 6] [--sizes 50000]
                             [--checkpoint-every 1]

Workloads (``bench/vs_spark_workloads.py``), each at every ``--sizes`` rows per step:

* ``aggregate``: the clickstream example (clean -> per-user running aggregate -> Parquet);
* ``six-stage``: JSON Lines orders, 2% malformed -> enrich -> a (country, user) running
  aggregate -> sink, and enrich -> a filter (big orders) -> a second sink;
* ``stateless``: events -> enrich -> filter -> project -> sink;
* ``many-channels``: the six-stage dataflow sized for a bigger cluster than the two cores it
  gets: 4, 6, 8, 6, 4 and 2 channels (30 tasks a step), four hash-partitioned edges, two sinks;
* ``deep-chain``: events -> enrich -> filter -> project -> a per-user running count -> sink, with
  a hash-partitioned edge (a shuffle) before every stage after the source.

Besides throughput and step latency, each run's start-up: from the process start to the first
output file visible in a sink (polled every 20 ms), on both sides; and where a step's time goes
on each side (``bench/breakdown.py``).

Equal input: every step's rows are written once as files, one per source channel, so that
ftpipeline's file source reads step k's files in step k and SS (``maxFilesPerTrigger``)
reads the same files in micro-batch k. The clickstream rows are the example's own generator
output (Parquet, like the generator's Arrow tables: no text parsing on either side); the
orders are JSON Lines, parsed by ftpipeline's reader (malformed -> dead letters) and by
Spark's (``DROPMALFORMED``). SS runs the same pipeline file (``bench/ss_side.py``), in a
fresh process each time, as ftpipeline starts fresh workers each run.

Cores: the machine has two, so both sides get two Spark cores: ftpipeline ``--parallelism``
(2) workers of ``local[1]`` each, every stage 2 channels; SS ``local[2]`` with
``spark.sql.shuffle.partitions`` 2. Throughput is the rows of the measured steps (the first
``--warmup`` are dropped on both sides) over the time the steps cover, the union of their
spans: ftpipeline's trigger-to-release (a step goes out while its predecessor's commit is
written, so spans overlap), SS's ``triggerExecution``; a pipeline with two sinks is two SS
queries, so there a step's latency is the longer of the two queries' batch k (they run side
by side, each at its own pace) and the union is the time either was busy.

``--recovery`` (aggregate workload): ftpipeline loses a worker mid-step S (``--kill-at-step S
--seed K``; the seed picks the worker) and the time to the next commit is the summary's
``to_commit_seconds``; SS's driver process (with its JVM) is SIGKILLed once batch S is committed,
restarted on the same checkpoint, and timed from the kill until the next batch is committed.
``--kill coordinator``: ftpipeline's comparable fault, ``ftpipeline run`` itself SIGKILLed once step S
is released (its workers, Redis and ZooKeeper live on), then ``run --resume`` started at once (it
takes the workers over), timed from the kill until a newer step is released.
SS writes its state store every batch; ftpipeline checkpoints every ``--checkpoint-every`` steps
(1 by default, the same durability), so the lost worker's aggregate state is restored from the
newest snapshot and only the steps after it are recomputed. ``--checkpoint-every 0`` shows lineage
alone, which rebuilds that state from every step's kept inputs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from collections.abc import Callable
from typing import Any

import pyarrow.dataset as ds
from rich.console import Console
from rich.table import Table

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import breakdown  # noqa: E402
import vs_spark_workloads as wl  # noqa: E402

from ftpipeline.obs.spans import busy_seconds, step_spans  # noqa: E402
from ftpipeline.worker.session import WORKER_JAVA_OPTIONS  # noqa: E402

SS_SIDE = BENCH / "ss_side.py"


@dataclass
class Side:
    """One run of one side: measured step latencies, busy seconds, rows out per sink."""

    rows: int
    latencies: list[float]
    busy: float
    out_rows: dict[str, int]
    startup: float  # process start -> first output visible, s
    detail: dict[str, Any]  # ours: the summary; SS: every query's progress reports (bench/breakdown.py)

    @property
    def rate(self) -> float:
        return self.rows / self.busy


@dataclass
class Row:
    workload: str
    rows_per_step: int
    ours_rows_s: float
    spark_rows_s: float
    ours_p50_ms: float
    ours_p99_ms: float
    spark_p50_ms: float
    spark_p99_ms: float
    ours_startup_s: float
    spark_startup_s: float
    same_output: bool
    ours_phases: dict[str, float]
    spark_phases: dict[str, float]

    @property
    def throughput_ratio(self) -> float:
        return self.ours_rows_s / self.spark_rows_s

    @property
    def latency_ratio(self) -> float:
        return self.ours_p50_ms / self.spark_p50_ms


# --- running each side -------------------------------------------------------------------

def command(args: list[str], what: str, timeout_s: float = 7200, watch: Path | None = None) -> float | None:
    """Run ``args`` to its end; with ``watch``, return the seconds from its start until the first output
    file is visible under that directory (``first_output``)."""
    seen: list[float] = []
    stop = threading.Event()
    started = time.monotonic()
    watcher = threading.Thread(target=first_output, args=(watch, started, seen, stop), daemon=True) if watch else None
    if watcher:
        watcher.start()
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=timeout_s)
    finally:
        stop.set()
        if watcher:
            watcher.join()
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-30:])
        raise RuntimeError(f"{what} exited with {done.returncode}:\n{tail}")
    return seen[0] if seen else None


def visible(directory: Path) -> bool:
    """Is a committed data file under ``directory``: ``<sink>/<part>/*.parquet``, no part of the path
    hidden (ftpipeline stages under ``_staging``, Spark writes under ``_temporary`` before its commit)?"""
    if not directory.is_dir():
        return False
    for sink in directory.iterdir():
        if sink.is_dir() and not sink.name.startswith(("_", ".")):
            for part in sink.iterdir():
                if part.is_dir() and not part.name.startswith(("_", ".")) and any(part.glob("*.parquet")):
                    return True
    return False


def first_output(directory: Path, started: float, seen: list[float], stop: threading.Event) -> None:
    """Poll every 20 ms; append the seconds from ``started`` to the first visible output."""
    while not stop.is_set():
        if visible(directory):
            seen.append(time.monotonic() - started)
            return
        time.sleep(0.02)


def ours_command(pipeline: Path, work: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "ftpipeline.cli", "run", str(pipeline), "--no-progress", "--overwrite",
            "--run-dir", str(work / "run"), "--summary-json", str(work / "summary.json"), *extra]


def spark_command(pipeline: Path, work: Path, cores: int, result: Path | None = None,
                  java_options: str = "") -> list[str]:
    return [sys.executable, str(SS_SIDE), str(pipeline), "--work", str(work), "--cores", str(cores),
            *(["--result", str(result)] if result else []),
            *([f"--java-options={java_options}"] if java_options else [])]


def out_rows(directory: Path) -> dict[str, int]:
    """Rows written per sink directory (names starting with ``_`` or ``.`` are not data)."""
    if not directory.is_dir():
        return {}
    return {d.name: ds.dataset(d, format="parquet").count_rows()
            for d in sorted(directory.iterdir()) if d.is_dir() and not d.name.startswith(("_", "."))}


def run_ours(pipeline: Path, work: Path, rows_per_step: int, warmup: int, extra: list[str]) -> Side:
    startup = command(ours_command(pipeline, work, *extra), "ftpipeline run", watch=work / "out")
    summary = json.loads((work / "summary.json").read_text())
    spans = step_spans(summary["commit_at"], summary["step_seconds"])[warmup:]
    seconds = [end - start for start, end in spans]
    return Side(rows_per_step * len(spans), seconds, busy_seconds(spans), out_rows(work / "out"), startup or float("nan"),
                summary)


def batches(reports: list[dict[str, Any]]) -> dict[int, tuple[float, float]]:
    """batchId -> (start, end) in epoch seconds, one per batch that read rows."""
    spans: dict[int, tuple[float, float]] = {}
    for p in reports:
        if p.get("numInputRows", 0) > 0 and p["batchId"] not in spans:
            start = datetime.fromisoformat(p["timestamp"]).timestamp()
            spans[p["batchId"]] = (start, start + p["durationMs"]["triggerExecution"] / 1000)
    return spans


def run_spark(pipeline: Path, work: Path, rows_per_step: int, warmup: int, cores: int, java_options: str) -> Side:
    result = work / "progress.json"
    startup = command(spark_command(pipeline, work, cores, result, java_options), "Spark Structured Streaming",
                      watch=work / "out")
    reports = json.loads(result.read_text())
    queries = [batches(r) for r in reports.values()]
    ids = sorted(set.intersection(*(set(q) for q in queries)))[warmup:]
    # a step's latency: the longest of its queries' batch k (they run side by side, each at its own
    # pace, so batch k of one may start long after the other's: a span across them would count that)
    latencies = [max(q[i][1] - q[i][0] for q in queries) for i in ids]
    every = [q[i] for q in queries for i in ids]
    return Side(rows_per_step * len(ids), latencies, busy_seconds(every), out_rows(work / "out"), startup or float("nan"),
                reports)


# --- the comparison -----------------------------------------------------------------------

def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def fresh(directory: Path) -> Path:
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    return directory


def compare(workload: str, size: int, data: Path, tmp: Path, args: argparse.Namespace,
            console: Console) -> Row:
    ours: list[Side] = []
    spark: list[Side] = []
    for pair in range(args.pairs):
        order = ("ours", "spark") if pair % 2 == 0 else ("spark", "ours")
        for side in order:
            work = fresh(tmp / side)
            pipeline = wl.pipeline(work / "pipeline.yaml", workload, data, work / "out", size, args.steps,
                                   args.parallelism)
            if side == "ours":
                ours.append(run_ours(pipeline, work, size, args.warmup, args.ours_args))
            else:
                spark.append(run_spark(pipeline, work, size, args.warmup, args.parallelism, args.ss_java_options))
            got = (ours if side == "ours" else spark)[-1]
            console.print(f"{workload} {size:,} rows/step, pair {pair + 1}, {side:5}: {got.rate:>10,.0f} rows/s, "
                          f"first output after {got.startup:.1f} s, out {got.out_rows}")
    same = all(o.out_rows == s.out_rows for o, s in zip(ours, spark))
    o_lat = [x for o in ours for x in o.latencies]
    s_lat = [x for s in spark for x in s.latencies]
    return Row(workload, size, statistics.median(o.rate for o in ours), statistics.median(s.rate for s in spark),
               1000 * percentile(o_lat, 0.5), 1000 * percentile(o_lat, 0.99),
               1000 * percentile(s_lat, 0.5), 1000 * percentile(s_lat, 0.99),
               statistics.median(o.startup for o in ours), statistics.median(s.startup for s in spark), same,
               breakdown.ours([o.detail for o in ours]), breakdown.spark([s.detail for s in spark], args.warmup))


def table(rows: list[Row], args: argparse.Namespace) -> Table:
    t = Table(title=f"ftpipeline vs Spark Structured Streaming: {args.steps} steps, first {args.warmup} dropped, "
                    f"{args.pairs} pairs, {args.parallelism} cores each")
    for column in ("workload", "rows/step", "ours rows/s", "SS rows/s", "ours÷SS", "ours p50/p99 ms",
                   "SS p50/p99 ms", "p50 ours÷SS", "first output ours / SS s", "same output"):
        t.add_column(column, justify="left" if column == "workload" else "right")
    for r in rows:
        t.add_row(r.workload, f"{r.rows_per_step:,}", f"{r.ours_rows_s:,.0f}", f"{r.spark_rows_s:,.0f}",
                  f"{r.throughput_ratio:.2f}", f"{r.ours_p50_ms:,.0f} / {r.ours_p99_ms:,.0f}",
                  f"{r.spark_p50_ms:,.0f} / {r.spark_p99_ms:,.0f}", f"{r.latency_ratio:.2f}",
                  f"{r.ours_startup_s:.1f} / {r.spark_startup_s:.1f}",
                  "yes" if r.same_output else "[red]NO[/red]")
    return t


def throughput(args: argparse.Namespace, console: Console, tmp: Path) -> list[dict[str, Any]]:
    rows: list[Row] = []
    for size in args.sizes:
        inputs: dict[str, Path] = {}
        for workload in args.workloads:
            kind = wl.input_kind(workload, args.parallelism)
            if kind not in inputs:
                inputs[kind] = fresh(tmp / f"in-{kind}-{size}")
                console.print(f"writing {args.steps} steps of {size:,} {kind} ...")
                wl.write_input(workload, inputs[kind], size, args.steps, args.parallelism)
            rows.append(compare(workload, size, inputs[kind], tmp, args, console))
    console.print(table(rows, args))
    console.print(breakdown.table([(r.workload, r.rows_per_step, r.ours_phases, r.spark_phases) for r in rows]))
    if not all(r.same_output for r in rows):
        console.print("[red]rows out differ between the sides in some row: the input or the logic is not equal[/red]")
    return [asdict(r) | {"throughput_ratio": r.throughput_ratio, "latency_ratio": r.latency_ratio} for r in rows]


# --- recovery ----------------------------------------------------------------------------

def ours_recovery(pipeline: Path, work: Path, step: int, seed: int) -> float:
    command(ours_command(pipeline, work, "--kill-at-step", str(step), "--seed", str(seed)), "ftpipeline run (kill)")
    recoveries = json.loads((work / "summary.json").read_text())["recoveries"]
    if len(recoveries) != 1 or recoveries[0]["to_commit_seconds"] is None:
        raise RuntimeError(f"expected one recovery followed by a commit, got {recoveries}")
    return float(recoveries[0]["to_commit_seconds"])


def released(out: Path) -> int:
    """The newest step ftpipeline's Parquet sink released into ``out`` (0: none)."""
    steps = [int(d.name.split("=", 1)[1]) for d in out.glob("step=*") if d.is_dir()] if out.is_dir() else []
    return max(steps, default=0)


def wait_released(out: Path, step: int, proc: subprocess.Popen[bytes], timeout_s: float = 900) -> float:
    return wait_until(lambda: released(out) >= step, proc, f"ftpipeline: step {step} released", timeout_s)


def ours_coordinator_recovery(pipeline: Path, work: Path, step: int, sink: str) -> float:
    """SIGKILL ``ftpipeline run`` itself (its workers, Redis and ZooKeeper live on) once step ``step`` is
    released, start ``run --resume`` at once, and time until a newer step is released."""
    out = work / "out" / sink
    proc = subprocess.Popen(ours_command(pipeline, work), start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_released(out, step, proc)
        seen, killed_at = released(out), time.monotonic()
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        resume = [arg for arg in ours_command(pipeline, work) if arg != "--overwrite"] + ["--resume"]
        proc = subprocess.Popen(resume, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return wait_released(out, seen + 1, proc) - killed_at
    finally:
        try:
            proc.wait(600)  # the resumed run ends by itself and stops what it took over
        except subprocess.TimeoutExpired:
            kill_group(proc)


def committed(commits: Path) -> int:
    """The newest committed batch id of an SS query (-1: none)."""
    ids = [int(p.name) for p in commits.iterdir() if p.name.isdigit()] if commits.is_dir() else []
    return max(ids, default=-1)


def wait_commit(commits: Path, batch: int, proc: subprocess.Popen[bytes], timeout_s: float = 900) -> float:
    return wait_until(lambda: committed(commits) >= batch, proc, f"SS: batch {batch} committed", timeout_s)


def wait_until(done: Callable[[], bool], proc: subprocess.Popen[bytes], what: str, timeout_s: float) -> float:
    """Poll every 10 ms until ``done``; the time it was. Fails if ``proc`` ends or the time runs out first."""
    deadline = time.monotonic() + timeout_s
    while not done():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"ended or stalled before {what} (exit {proc.returncode})")
        time.sleep(0.01)
    return time.monotonic()


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the driver and its JVM: the whole machine of a local SS job
    except ProcessLookupError:
        pass
    proc.wait()


def spark_recovery(pipeline: Path, work: Path, cores: int, step: int, sink: str, java_options: str = "") -> float:
    return killed_and_restarted(spark_command(pipeline, work, cores, java_options=java_options),
                                work / "checkpoints" / sink / "commits", step)


def killed_and_restarted(start: list[str], commits: Path, step: int) -> float:
    """An SS job started with ``start`` is SIGKILLed once batch ``step`` is committed (in ``commits``) and
    started again on its checkpoint: seconds from the kill to its next committed batch."""
    proc = subprocess.Popen(start, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_commit(commits, step - 1, proc)  # batch ids count from 0: step S is batch S-1
        killed_at = time.monotonic()
        kill_group(proc)
        proc = subprocess.Popen(start, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return wait_commit(commits, committed(commits) + 1, proc) - killed_at
    finally:
        kill_group(proc)


def recovery(args: argparse.Namespace, console: Console, tmp: Path) -> dict[str, Any]:
    size, steps = args.sizes[-1], args.kill_step + 3
    data = fresh(tmp / "in-clicks")
    console.print(f"writing {steps} steps of {size:,} clicks ...")
    wl.write_input("aggregate", data, size, steps, args.parallelism)
    ours: list[float] = []
    spark: list[float] = []
    for seed in range(args.kills):
        for side in ("ours", "spark") if seed % 2 == 0 else ("spark", "ours"):
            work = fresh(tmp / side)
            pipeline = wl.pipeline(work / "pipeline.yaml", "aggregate", data, work / "out", size, steps,
                                   args.parallelism, args.checkpoint_every)
            if side == "ours" and args.kill == "coordinator":
                ours.append(ours_coordinator_recovery(pipeline, work, args.kill_step, "output"))
            elif side == "ours":
                ours.append(ours_recovery(pipeline, work, args.kill_step, seed))
            else:
                spark.append(spark_recovery(pipeline, work, args.parallelism, args.kill_step, "output",
                                            args.ss_java_options))
            console.print(f"kill {seed + 1} {side:5}: {(ours if side == 'ours' else spark)[-1]:.2f} s to the next commit")
    m_ours, m_spark = statistics.median(ours), statistics.median(spark)
    every = f"ftpipeline checkpoints every {args.checkpoint_every} steps" if args.checkpoint_every else "no checkpoints"
    t = Table(title=f"recovery, aggregate at {size:,} rows/step: kill at step {args.kill_step}, {args.kills} kills, {every}")
    for column in ("side", "what is killed", "median s to next commit", "each (s)"):
        t.add_column(column)
    what = ("ftpipeline run itself (SIGKILL), then run --resume" if args.kill == "coordinator"
            else "one worker (seeded), mid-step")
    t.add_row("ftpipeline", what, f"{m_ours:.2f}", " ".join(f"{x:.2f}" for x in ours))
    t.add_row("Spark SS", "the driver + JVM, batch committed", f"{m_spark:.2f}", " ".join(f"{x:.2f}" for x in spark))
    console.print(t)
    console.print(f"ratio ours÷SS: {m_ours / m_spark:.2f}")
    return {"rows_per_step": size, "kill_step": args.kill_step, "checkpoint_every": args.checkpoint_every,
            "kill": args.kill,
            "ours_seconds": ours, "spark_seconds": spark,
            "ours_median": m_ours, "spark_median": m_spark, "ratio": m_ours / m_spark}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--workloads", nargs="+", choices=wl.WORKLOADS, default=list(wl.WORKLOADS))
    parser.add_argument("--sizes", nargs="+", type=int, default=[5000, 50000], help="rows per step")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3, help="first steps/batches dropped on both sides")
    parser.add_argument("--pairs", type=int, default=2, help="runs of each side, alternating which goes first")
    parser.add_argument("--parallelism", type=int, default=2,
                        help="ftpipeline workers and channels per stage; SS local[N] and shuffle partitions")
    parser.add_argument("--recovery", action="store_true", help="compare recovery instead (aggregate workload, "
                                                                "the last --sizes value)")
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument("--kill", choices=("worker", "coordinator"), default="worker",
                        help="--recovery: what ftpipeline loses: one worker (its recovery), or the coordinator "
                             "(ftpipeline run SIGKILLed once step --kill-step is released, then run --resume, "
                             "which takes over the workers it left running)")
    parser.add_argument("--kill-step", type=int, default=6)
    parser.add_argument("--checkpoint-every", type=int, default=1, metavar="N",
                        help="--recovery: ftpipeline checkpoints every N steps, as SS keeps its state every batch "
                             "(0: none, lineage alone rebuilds the lost state from step 1)")
    parser.add_argument("--ours-args", nargs="*", default=[], metavar="ARG",
                        help="extra options of ftpipeline run (e.g. --ours-args=--no-chaining)")
    parser.add_argument("--ss-java-options", default="", metavar="OPTS",
                        help="JVM options of SS's driver (default: the JVM's own; ftpipeline's workers run with "
                             f"{WORKER_JAVA_OPTIONS!r}, e.g. --ss-java-options='{WORKER_JAVA_OPTIONS}')")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args()
    if args.steps <= args.warmup or args.kill_step < 2 or min(args.pairs, args.kills, args.parallelism) < 1:
        parser.error("needs --steps > --warmup, --kill-step >= 2, and at least one pair, kill and core")
    console = Console()
    if not console.is_terminal:  # a log file: wide enough for the table
        console = Console(width=150)
    with tempfile.TemporaryDirectory(prefix="vs-spark-") as tmp:
        result: Any = recovery(args, console, Path(tmp)) if args.recovery else throughput(args, console, Path(tmp))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
