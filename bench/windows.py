"""Event-time windows: ftpipeline vs Spark Structured Streaming (SS), the same job, one run.

Why: a windowed aggregate is where a streaming engine's event-time machinery shows: what a step
costs once windows are kept and fired, how soon a window's row is out after its end, what its state
costs to keep, how fast it is back after a crash. This prints those four figures for both, measured
side by side, alternating the two (drift in the machine's load hits both alike), as ratios ours ÷ SS.

    python bench/windows.py [--sizes 5000 50000] [--steps 40] [--warmup 5] [--pairs 2] [--window 60]
                            [--span 2] [--lag 5] [--live-windows 6] [--kills 2] [--kill-step 6] [--json FILE]
    python bench/windows.py --quick                       # tiny sizes, few steps: does every path run?

The job (``bench/windows_workload.py``; the SS side, ``bench/ss_windows_side.py``, translates the
same FTPipeline file): page views ``{user, page, ts (ms), dwell_ms}`` -> per page, tumbling
event-time windows of ``--window`` seconds (1 minute), views counted and ``dwell_ms`` averaged,
the watermark ``--delay`` (10 s) behind the largest event time read, each window emitted once
when the watermark passes its end (append mode) -> Parquet. SS: ``withWatermark``,
``groupBy(window(ts), page)``, append output mode, the RocksDB state store, its Parquet file sink.
Input: one Parquet file per (step, channel), each step ``--span`` seconds of event time. Both sides
get two Spark cores, as in ``bench/vs_spark.py``: ftpipeline two workers of ``local[1]``, every
stage two channels; SS ``local[2]``, two shuffle partitions. ftpipeline checkpoints every
``--checkpoint-every`` steps (1: SS keeps its state every batch, the same durability).

1. throughput: both read ``--steps`` steps of files (SS with ``maxFilesPerTrigger`` = 2: one step's
   files per micro-batch); rows of the steps after ``--warmup`` over the time those steps cover,
   the union of their spans (``ftpipeline.obs.spans``; SS: each batch's ``triggerExecution``).
   The windows both emitted must hold the same rows.
2. window end -> visible: a feeder drops step k's files into an empty input directory (rename
   into place) at wall time t0 + (k - 1) * span, t0 being the moment the side committed step 1,
   so event time advances with wall time (SS's batches then take every file that has arrived, so a
   batch slower than the feed does not fall behind it). A window's latency is the time from its end,
   mapped to wall time, until its row is visible: ftpipeline's released ``step=N`` directory, SS's batch in
   ``_spark_metadata`` (polled every 20 ms); p50 and p90 over ``--live-windows`` windows after
   ``--live-warmup``, and the part past the floor. The floor neither side can beat: the watermark passes a
   window's end only once views ``--delay`` newer are read, so the release of the step holding them.
3. state after N windows, at the end of each throughput run: what a restore of the newest
   checkpoint reads (ftpipeline: its epoch directory and the shared table files it names; SS: each
   partition's newest ``N.zip`` and its SST files), and all the state kept on disk (ftpipeline:
   its checkpoint storage, 2 checkpoints kept; SS: ``checkpoint/state``, ``minBatchesToRetain``
   100 versions by default).
4. kill -> next commit: ftpipeline loses a worker mid-step ``--kill-step`` (``--kill-at-step``,
   the seed picks the worker) and the summary's recovery ``to_commit_seconds`` is the figure;
   SS's driver (with its JVM) is SIGKILLed once batch ``--kill-step`` is committed, restarted on
   the same checkpoint, and timed from the kill to its next committed batch.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
from rich.console import Console
from rich.table import Table

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import vs_spark as vs  # noqa: E402
import windows_workload as ww  # noqa: E402

from ftpipeline.obs.spans import busy_seconds, step_spans  # noqa: E402
from ftpipeline.worker.session import WORKER_JAVA_OPTIONS  # noqa: E402

SS_SIDE = BENCH / "ss_windows_side.py"


# --- the sides' output ---------------------------------------------------------------------

def starts_ms(column: pa.ChunkedArray) -> np.ndarray:
    """Window starts in ms since the epoch (ftpipeline writes micros with UTC, Spark INT96 nanos)."""
    if pa.types.is_timestamp(column.type):
        column = column.cast(pa.timestamp("ms", column.type.tz))  # safe: window starts are whole ms
    return np.asarray(column.cast(pa.int64()).to_numpy(), dtype=np.int64)


def window_rows(directory: Path) -> dict[tuple[str, int], tuple[int, float]]:
    """(page, window start ms) -> (views, avg dwell) of every row a sink holds."""
    if not directory.is_dir():
        return {}
    table = ds.dataset(directory, format="parquet").to_table(columns=["page", "window_start", "views", "avg_dwell_ms"])
    return {(p, int(s)): (int(v), round(float(a), 6)) for p, s, v, a in
            zip(table.column("page").to_pylist(), starts_ms(table.column("window_start")),
                table.column("views").to_pylist(), table.column("avg_dwell_ms").to_pylist())}


def same_windows(ours: dict[tuple[str, int], Any], spark: dict[tuple[str, int], Any]) -> bool:
    """Equal rows in every window both emitted, and the windows only one side emitted all later than those
    (a side may have closed a last window the other had not when the input ran out)."""
    a, b = {s for _, s in ours}, {s for _, s in spark}
    common = a & b
    if not common or any(s < max(common) for s in a ^ b):
        return False
    return {k: v for k, v in ours.items() if k[1] in common} == {k: v for k, v in spark.items() if k[1] in common}


def disk_bytes(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.rglob("*") if p.is_file()) if directory.is_dir() else 0


def ours_newest_bytes(storage: Path) -> int:
    """What a restore of ftpipeline's newest checkpoint reads: its epoch directory and the shared RocksDB
    table files its snapshots name (``files.json``)."""
    epochs = [d for d in storage.glob("*/epoch-*") if (d / "manifest.json").exists()]
    if not epochs:
        return 0
    newest = max(epochs, key=lambda d: int(d.name.split("-")[1]))
    shared: set[Path] = {newest.parent / name for listing in newest.glob("state/*.rocks/files.json")
              for name in json.loads(listing.read_text())["files"].values()}
    return disk_bytes(newest) + sum(p.stat().st_size for p in shared if p.exists())


def spark_newest_bytes(state: Path) -> int:
    """What a restore of SS's newest state version reads: in each state store's directory
    (``state/<operator>/<partition>``, or a store of its own below it: a stream-stream join keeps four a
    partition) its newest ``N.zip`` and the SST files its metadata names."""
    total = 0
    for part in {z.parent for z in state.rglob("*.zip")} if state.is_dir() else set():
        versions = [z for z in part.glob("*.zip") if z.stem.isdigit()]
        if versions:
            newest = max(versions, key=lambda z: int(z.stem))
            with zipfile.ZipFile(newest) as z:
                meta = json.loads(z.read("metadata").decode().splitlines()[1])  # "v1", then the JSON
            total += newest.stat().st_size + sum(int(f["sizeBytes"]) for f in meta["sstFiles"])
    return total


class Watcher(threading.Thread):
    """Polls a side's committed output and notes, for each window start, when its rows were first visible:
    ftpipeline's released ``step=N`` directories, SS's batches in its sink's ``_spark_metadata`` log."""

    def __init__(self, side: str, sink: Path, poll_s: float = 0.02) -> None:
        super().__init__(daemon=True)
        self.side, self.sink, self.poll_s = side, sink, poll_s
        self.seen: dict[int, float] = {}
        self.done: set[str] = set()
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(self.poll_s):
            now = time.time()
            for path in self.new_files():
                for start in starts_ms(pq.read_table(path, columns=["window_start"]).column("window_start")).tolist():
                    self.seen.setdefault(int(start), now)

    def new_files(self) -> list[Path]:
        files: list[Path] = []
        if self.side == "ours":
            steps = [d for d in self.sink.glob("step=*") if d.name not in self.done] if self.sink.is_dir() else []
            for d in steps:
                self.done.add(d.name)
                files += sorted(d.glob("*.parquet"))
            return files
        log = self.sink / "_spark_metadata"
        entries = [e for e in log.iterdir() if e.name.split(".")[0].isdigit()] if log.is_dir() else []
        for e in sorted(entries, key=lambda e: int(e.name.split(".")[0])):
            if e.name in self.done:
                continue
            self.done.add(e.name)
            for line in e.read_text().splitlines()[1:]:  # "v1", then one JSON entry per file
                entry = json.loads(line)
                path = unquote(urlparse(entry["path"]).path)
                if entry.get("action") == "add" and path not in self.done:
                    self.done.add(path)
                    files.append(Path(path))
        return files


# --- running each side ------------------------------------------------------------------------

def ss_command(pipeline: Path, work: Path, args: argparse.Namespace, *extra: str) -> list[str]:
    return [sys.executable, str(SS_SIDE), str(pipeline), "--work", str(work), "--cores", str(args.parallelism),
            *([f"--java-options={args.ss_java_options}"] if args.ss_java_options else []), *extra]


@dataclass
class Run:
    """One throughput run of one side."""

    rate: float              # rows/s over the measured steps
    newest_bytes: int        # what a restore of the newest checkpoint (state version) reads
    stored_bytes: int        # ours: the checkpoint storage on disk; SS: its checkpoint's state/ directory
    written_bytes: int       # ours: the newest checkpoint's bytes in the run's summary (0 for SS)
    rows: dict[tuple[str, int], tuple[int, float]] = field(repr=False)

    @property
    def windows(self) -> int:
        return len({s for _, s in self.rows})


def run_ours(pipeline: Path, work: Path, size: int, args: argparse.Namespace) -> Run:
    vs.command(vs.ours_command(pipeline, work, *args.ours_args), "ftpipeline run")
    summary = json.loads((work / "summary.json").read_text())
    spans = step_spans(summary["commit_at"], summary["step_seconds"])[args.warmup:]
    checkpoints = summary["checkpoints"]
    return Run(size * len(spans) / busy_seconds(spans), ours_newest_bytes(work / "checkpoints"),
               disk_bytes(work / "checkpoints"), int(checkpoints[-1]["bytes"]) if checkpoints else 0,
               window_rows(work / "out" / ww.SINK))


def run_spark(pipeline: Path, work: Path, size: int, args: argparse.Namespace) -> Run:
    result = work / "progress.json"
    vs.command(ss_command(pipeline, work, args, "--result", str(result)), "Spark Structured Streaming")
    spans = vs.batches(json.loads(result.read_text()))
    measured = [spans[i] for i in sorted(spans)[args.warmup:]]
    state = work / "checkpoint" / "state"
    return Run(size * len(measured) / busy_seconds(measured), spark_newest_bytes(state), disk_bytes(state), 0,
               window_rows(work / "out" / ww.SINK))


# --- window end -> visible ----------------------------------------------------------------------

@dataclass
class Live:
    latencies: list[float]   # s from each measured window's end (as wall time) to its row visible
    floors: list[float]      # s from its end to the release of the step whose views close it
    missing: int             # measured windows never seen before the deadline
    over: list[float]        # per window seen: its latency less its floor (what the engine adds)


def release(files: list[Path], inbox: Path) -> None:
    for path in files:
        shutil.copyfile(path, inbox / f".{path.name}")  # hidden from both readers until renamed
        os.rename(inbox / f".{path.name}", inbox / path.name)


def wait_for(what: Callable[[], bool], proc: subprocess.Popen[bytes], log: Path, timeout_s: float, doing: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not what():
        if proc.poll() is not None or time.monotonic() > deadline:
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:]) if log.exists() else ""
            raise RuntimeError(f"{doing}: the side ended or stalled (exit {proc.returncode}):\n{tail}")
        time.sleep(0.02)


def stop_side(side: str, proc: subprocess.Popen[bytes], work: Path) -> None:
    if side == "ours":
        proc.send_signal(signal.SIGINT)  # the run shuts its workers and servers down
    else:
        (work / "stop").touch()
    try:
        proc.wait(120)
    except subprocess.TimeoutExpired:
        vs.kill_group(proc)
    vs.kill_group(proc)  # anything of its process group still there


def live(side: str, size: int, feed: Path, largest: list[int], tmp: Path, job: ww.Job,
         args: argparse.Namespace) -> Live:
    work = vs.fresh(tmp / f"live-{side}")
    inbox = vs.fresh(work / "inbox")
    pipeline = ww.pipeline(work / "pipeline.yaml", inbox, work, size, job, None, True, args.checkpoint_every)
    cmd = (vs.ours_command(pipeline, work, *args.ours_args) if side == "ours" else
           ss_command(pipeline, work, args, "--until", str(work / "stop")))
    log = work / "side.log"
    steps: dict[int, list[Path]] = {}
    for path in sorted(feed.glob("s*.parquet")):
        steps.setdefault(int(path.name[1:6]), []).append(path)  # names are s<step:05d>-c<channel>-...
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, start_new_session=True, stdout=out, stderr=subprocess.STDOUT)
    sink = work / "out" / ww.SINK
    watcher = Watcher(side, sink)
    try:
        release(steps[1], inbox)
        first = sink / "step=1" if side == "ours" else work / "checkpoint" / "commits" / "0"
        wait_for(first.exists, proc, log, 600, "waiting for step 1")
        t0 = time.time()
        watcher.start()
        span = job.span_s
        for k in range(2, len(steps) + 1):
            time.sleep(max(0.0, t0 + (k - 1) * span - time.time()))
            release(steps[k], inbox)
            if proc.poll() is not None:
                wait_for(lambda: False, proc, log, 0, f"feeding step {k}")
        w_ms, d_ms, e0 = round(job.window_s * 1000), round(job.delay_s * 1000), ww.E0_MS
        closed = [e0 + i * w_ms for i in range(math.ceil(len(steps) * span * 1000 / w_ms) + 1)
                  if e0 + (i + 1) * w_ms + d_ms <= largest[-1]]  # full windows the released views close
        measured = closed[args.live_warmup:args.live_warmup + args.live_windows]
        wait_for(lambda: all(s in watcher.seen for s in measured) or time.time() > t0 + len(steps) * span
                 + args.window + args.delay + 60, proc, log, 3600, "waiting for the last windows")
    finally:
        watcher.stop.set()
        stop_side(side, proc, work)
    latencies, floors, over, missing = [], [], [], 0
    for s in measured:
        end = s + w_ms
        wall_end = t0 + (end - e0 - span * 1000) / 1000  # step k's events end at e0 + k*span, released t0 + (k-1)*span
        closing = next(k for k, top in enumerate(largest, 1) if top >= end + d_ms)
        floors.append(t0 + (closing - 1) * span - wall_end)
        if s in watcher.seen:
            latencies.append(watcher.seen[s] - wall_end)
            over.append(latencies[-1] - floors[-1])
        else:
            missing += 1
    return Live(latencies, floors, missing, over)


# --- kill -> next commit ------------------------------------------------------------------------

def spark_recovery(pipeline: Path, work: Path, step: int, args: argparse.Namespace) -> float:
    return vs.killed_and_restarted(ss_command(pipeline, work, args), work / "checkpoint" / "commits", step)


# --- the comparison -------------------------------------------------------------------------------

SIDES = ("ours", "spark")


def per_side() -> dict[str, list[Any]]:
    return {side: [] for side in SIDES}


@dataclass
class Result:
    """One step size's figures, each side's ("ours", "spark") one per run or measured window."""

    rows_per_step: int
    rows_s: dict[str, list[float]] = field(default_factory=per_side)
    newest_bytes: dict[str, list[int]] = field(default_factory=per_side)
    stored_bytes: dict[str, list[int]] = field(default_factory=per_side)
    latency_s: dict[str, list[float]] = field(default_factory=per_side)
    over_s: dict[str, list[float]] = field(default_factory=per_side)
    kill_s: dict[str, list[float]] = field(default_factory=per_side)
    ours_summary_bytes: list[int] = field(default_factory=list)
    windows: list[int] = field(default_factory=list)
    same_output: list[bool] = field(default_factory=list)
    floor_s: list[float] = field(default_factory=list)
    missing: dict[str, int] = field(default_factory=dict)

    def medians(self, figure: dict[str, list[float]] | dict[str, list[int]], scale: float = 1) -> tuple[float, float]:
        return statistics.median(figure["ours"]) / scale, statistics.median(figure["spark"]) / scale

    def figures(self) -> list[tuple[str, float, float, str]]:
        """(figure, ours, SS, format) of every figure measured."""
        out: list[tuple[str, float, float, str]] = []
        if self.rows_s["ours"]:
            out.append(("throughput, rows/s", *self.medians(self.rows_s), ",.0f"))
            out.append((f"state after {min(self.windows)} windows, KB", *self.medians(self.newest_bytes, 1e3), ",.0f"))
            out.append(("state on disk, KB", *self.medians(self.stored_bytes, 1e3), ",.0f"))
        if all(self.latency_s.values()):
            for q in (0.5, 0.9):
                out.append((f"window end -> visible p{round(q * 100)}, s", vs.percentile(self.latency_s["ours"], q),
                            vs.percentile(self.latency_s["spark"], q), ".2f"))
            out.append(("  of which past the floor p50, s", vs.percentile(self.over_s["ours"], 0.5),
                        vs.percentile(self.over_s["spark"], 0.5), ".2f"))
        if self.kill_s["ours"]:
            out.append(("kill -> next commit, s", *self.medians(self.kill_s), ".2f"))
        return out


def measure(size: int, tmp: Path, job: ww.Job, args: argparse.Namespace, console: Console) -> Result:
    result = Result(size)
    data = vs.fresh(tmp / f"in-{size}")
    steps = max(args.steps, args.kill_step + 3)
    if not {"throughput", "recovery"} <= set(args.skip):
        console.print(f"writing {steps} steps of {size:,} views ...")
        ww.write_input(data, size, steps, job)

    def bounded(side: str, name: str, n: int) -> tuple[Path, Path]:
        work = vs.fresh(tmp / f"{name}-{side}")
        part = vs.fresh(work / "in")  # the first n steps' files (SS reads whatever the directory holds)
        for path in data.iterdir():
            if int(path.name[1:6]) <= n:
                os.link(path, part / path.name)
        return ww.pipeline(work / "pipeline.yaml", part, work, size, job, n, False, args.checkpoint_every), work

    if "throughput" not in args.skip:
        for pair in range(args.pairs):
            runs: dict[str, Run] = {}
            for side in SIDES if pair % 2 == 0 else SIDES[::-1]:
                pipeline, work = bounded(side, "t", args.steps)
                run = runs[side] = (run_ours if side == "ours" else run_spark)(pipeline, work, size, args)
                result.rows_s[side].append(run.rate)
                result.newest_bytes[side].append(run.newest_bytes)
                result.stored_bytes[side].append(run.stored_bytes)
                result.windows.append(run.windows)
                console.print(f"{size:,} rows/step, pair {pair + 1}, {side:5}: {run.rate:>10,.0f} rows/s, "
                              f"{run.windows} windows out, newest checkpoint {run.newest_bytes:,} B")
            result.ours_summary_bytes.append(runs["ours"].written_bytes)
            result.same_output.append(same_windows(runs["ours"].rows, runs["spark"].rows))
    if "latency" not in args.skip:
        w = args.window
        live_steps = math.ceil(((args.live_warmup + args.live_windows + 1) * w + args.delay) / args.span) + 2
        feed = vs.fresh(tmp / f"feed-{size}")
        largest = ww.write_input(feed, size, live_steps, job)
        console.print(f"{size:,} rows/step: {live_steps} steps released live, one every {args.span:g} s ...")
        for side in SIDES if args.sizes.index(size) % 2 == 0 else SIDES[::-1]:
            got = live(side, size, feed, largest, tmp, job, args)
            result.latency_s[side] += got.latencies
            result.over_s[side] += got.over
            result.floor_s, result.missing[side] = got.floors, got.missing
            console.print(f"{size:,} rows/step, live, {side:5}: window end -> visible "
                          + " ".join(f"{x:.2f}" for x in got.latencies) + " s, floors "
                          + " ".join(f"{x:.2f}" for x in got.floors) + " s"
                          + (f", {got.missing} never seen" if got.missing else ""))
    if "recovery" not in args.skip:
        for kill in range(args.kills):
            for side in SIDES if kill % 2 == 0 else SIDES[::-1]:
                pipeline, work = bounded(side, "k", args.kill_step + 3)
                took = (vs.ours_recovery(pipeline, work, args.kill_step, kill) if side == "ours" else
                        spark_recovery(pipeline, work, args.kill_step, args))
                result.kill_s[side].append(took)
                console.print(f"{size:,} rows/step, kill {kill + 1}, {side:5}: {took:.2f} s to the next commit")
    return result


NOTES = {"state after": "the newest checkpoint, as a restore reads it",
         "state on disk": "ours: checkpoint storage (2 kept); SS: state/ (100 versions kept)"}


def table(results: list[Result], args: argparse.Namespace) -> Table:
    t = Table(title=f"event-time windows ({args.window:g} s tumbling, watermark {args.delay:g} s), ftpipeline vs "
                    f"Spark Structured Streaming: {args.steps} steps of {args.span:g} s of event time, first "
                    f"{args.warmup} dropped, {args.pairs} pair(s), {args.parallelism} cores each")
    for column in ("rows/step", "figure", "ours", "SS", "ours÷SS", "note"):
        t.add_column(column, justify="left" if column in ("figure", "note") else "right")
    for r in results:
        for name, ours, spark, fmt in r.figures():
            note = next((text for start, text in NOTES.items() if name.startswith(start)), "")
            if name.startswith("throughput"):
                note = "same windows" if all(r.same_output) else "[red]windows DIFFER[/red]"
            elif name.startswith("window end") and r.floor_s:
                note = f"floor {vs.percentile(r.floor_s, 0.5 if 'p50' in name else 0.9):.2f} s" + (
                    f", never seen {r.missing}" if any(r.missing.values()) else "")
            ratio = ours / spark
            t.add_row(f"{r.rows_per_step:,}", name, format(ours, fmt), format(spark, fmt),
                      f"{ratio:.2f}" if ratio >= 0.1 else f"{ratio:.3f}", note)
    return t


QUICK = {"sizes": [500, 2000], "steps": 8, "warmup": 2, "pairs": 1, "window": 4.0, "span": 3.0, "pages": 50,
         "live_windows": 2, "live_warmup": 0, "kills": 1, "kill_step": 3}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes", nargs="+", type=int, default=[5000, 50000], help="rows per step")
    parser.add_argument("--steps", type=int, default=40, help="steps of a throughput run")
    parser.add_argument("--warmup", type=int, default=5, help="first steps/batches dropped on both sides")
    parser.add_argument("--pairs", type=int, default=2, help="throughput runs of each side, alternating who goes first")
    parser.add_argument("--window", type=float, default=60.0, help="tumbling window size, s")
    parser.add_argument("--delay", type=float, default=10.0, help="the watermark's max out-of-orderness, s")
    parser.add_argument("--span", type=float, default=2.0,
                        help="event time a step covers, s (the live feed releases a step every SPAN s)")
    parser.add_argument("--lag", type=float, default=5.0,
                        help="a fifth of the views are up to LAG s older than their step's span (out of order)")
    parser.add_argument("--pages", type=int, default=1000, help="keys")
    parser.add_argument("--live-windows", type=int, default=6, help="windows measured for the latency")
    parser.add_argument("--live-warmup", type=int, default=1, help="windows left out before those")
    parser.add_argument("--kills", type=int, default=2, help="kills of each side per size")
    parser.add_argument("--kill-step", type=int, default=6)
    parser.add_argument("--checkpoint-every", type=int, default=1, metavar="N", help="ftpipeline's checkpoint interval")
    parser.add_argument("--parallelism", type=int, default=2,
                        help="ftpipeline workers and channels per stage; SS local[N] and shuffle partitions")
    parser.add_argument("--skip", nargs="*", default=[], choices=["throughput", "latency", "recovery"])
    parser.add_argument("--ours-args", nargs="*", default=[], metavar="ARG", help="extra options of ftpipeline run")
    parser.add_argument("--ss-java-options", default="", metavar="OPTS",
                        help=f"JVM options of SS's driver (ftpipeline's workers run with {WORKER_JAVA_OPTIONS!r})")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, few steps (options given win): "
                                                             + json.dumps(QUICK))
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args()
    if args.quick:
        parser.set_defaults(**QUICK)
        args = parser.parse_args()
    if args.steps <= args.warmup or args.kill_step < 2 or min(args.pairs, args.kills, args.live_windows) < 1:
        parser.error("needs --steps > --warmup, --kill-step >= 2, and at least one pair, kill and live window")
    if args.span + args.lag > args.delay or args.window * 1000 % 1 or args.delay * 1000 % 1:
        parser.error("needs --span + --lag <= --delay (no view is then late) and whole milliseconds")
    job = ww.Job(args.window, args.delay, args.span, args.pages, args.parallelism, args.lag)
    console = Console(width=None if Console().is_terminal else 160)  # a log file: wide enough for the table
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench-windows-") as tmp:
        results = [measure(size, Path(tmp), job, args, console) for size in args.sizes]
    console.print(table(results, args))
    console.print(f"{time.monotonic() - started:.0f} s in all")
    if args.json:
        args.json.write_text(json.dumps([asdict(r) | {"figures": r.figures()} for r in results], indent=2))


if __name__ == "__main__":
    main()
