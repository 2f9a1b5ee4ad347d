"""A transform task's time collected vs through files, and a step larger than the Spark driver's memory.

Part 1, side by side in one SparkSession (``local[2]``): the same task (a
filter and a new column, then the hash column of a 2-channel edge; the
example's shape) on inputs of ``--sizes`` MB, run by a worker's TaskRunner
once with its result collected (``toArrow``) and once through files
(``dataflow/spill.py``). Printed: the median of ``--repeat`` runs of each,
and files ÷ collected. The crossing is what ``spark.maxInMemoryBytes``'s
default (64 MiB) is chosen by.

Part 2, with ``--beyond MB``: a task of that input in a worker process whose
Spark driver has ``--driver-memory`` of heap, once collected and once
through files, each in a fresh process. Printed: whether it finished (or the
error it ended with), its time, and the peak anonymous resident memory
(what the process allocated, not the page cache of the memory-mapped input)
of the worker's Python process and of its JVM.

    python bench/large_step.py                        # part 1 at 4, 32 and 128 MB
    python bench/large_step.py --sizes 16,64,256 --beyond 1536 --driver-memory 512m
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from rich.console import Console
from rich.table import Table

from ftpipeline.lineage.naming import Task, TaskKind
from ftpipeline.obs.errors import one_line
from ftpipeline.spec.load import load_entry_module, parse_pipeline
from ftpipeline.worker.buffer import WHOLE, ObjectBuffer, write_ipc
from ftpipeline.worker.executor import TaskRunner
from ftpipeline.worker.session import build_session

PIPELINE = """
apiVersion: ftpipeline.io/v1alpha1
kind: FTPipeline
metadata: {name: large-step}
spec:
  image: x
  entryPoint: fns.py
  workers: 1
  stages:
    - {name: orders, source: {generator: {function: orders, rowsPerStep: 10}}}
    - {name: enrich, inputs: [{stage: orders, partition: hash, keys: [user_id]}], transform: {function: enrich}}
    - name: per-user
      parallelism: 2
      inputs: [{stage: enrich, partition: hash, keys: [user_id]}]
      aggregate: {keyBy: [user_id], aggregations: [{name: n, op: count}]}
    - {name: totals, parallelism: 2, inputs: [{stage: per-user}], sink: {parquet: {path: totals}}}
"""

FUNCTIONS = """
from pyspark.sql import functions as F


def orders(ctx):
    return None


def enrich(df):
    return df.filter(F.col("amount") >= 1.0).withColumn("big", F.col("amount") > 50.0)
"""

ROW_BYTES = 8 + 8 + 8 + 4 + 4 + 64  # n, amount, user_id (offsets + ~8 chars), payload (offsets + 64 chars)


def rows(megabytes: int) -> pa.Table:
    n = megabytes * 1024 * 1024 // ROW_BYTES
    i = pa.array(range(n), pa.int64())
    return pa.table({
        "n": i,
        "amount": pc.cast(pc.bit_wise_and(i, 127), pa.float64()),
        "user_id": pc.binary_join_element_wise("u", pc.cast(pc.bit_wise_and(i, 65535), pa.string()), ""),
        "payload": pa.array(["x" * 64], pa.string()).take(pa.array([0] * n)),
    })


def runner(spark: Any, directory: Path, limit: int) -> TaskRunner:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "fns.py").write_text(FUNCTIONS)
    spec = dataclasses.replace(parse_pipeline(PIPELINE, directory), max_in_memory_bytes=limit)
    buffer = ObjectBuffer(directory / "buffer")
    buffer.reset()
    return TaskRunner(spark, spec, load_entry_module(spec.entry_point, spec.base_dir), buffer)


def one_task(run: TaskRunner, source: Path, step: int) -> float:
    started = time.perf_counter()
    result = run.run(Task(TaskKind.TRANSFORM, "enrich", 0, step), [["orders.0.1.enrich.0.0", str(source), WHOLE]])
    seconds = time.perf_counter() - started
    for name, *_ in result["outputs"]:
        run.buffer.drop(str(name))
    return seconds


def side_by_side(args: argparse.Namespace, work: Path, console: Console) -> list[dict[str, Any]]:
    spark = build_session("local[2]", {}, work / "spark", "large-step-bench")
    collected, files = runner(spark, work / "collected", 1 << 50), runner(spark, work / "files", 0)
    table = Table(title=f"one transform task, median of {args.repeat} (after one warm-up each)")
    for column in ("input MB", "rows", "collected s", "through files s", "files ÷ collected"):
        table.add_column(column, justify="right")
    out = []
    step = 0
    for mb in (int(s) for s in args.sizes.split(",")):
        source = work / f"input-{mb}.arrow"
        data = rows(mb)
        write_ipc(source, data)
        times: dict[str, list[float]] = {"collected": [], "files": []}
        for _ in range(args.repeat + 1):
            for name, run in (("collected", collected), ("files", files)):
                step += 1
                times[name].append(one_task(run, source, step))
        c, f = (statistics.median(times[k][1:]) for k in ("collected", "files"))
        table.add_row(str(mb), f"{data.num_rows:,}", f"{c:.3f}", f"{f:.3f}", f"{f / c:.2f}")
        out.append({"mb": mb, "rows": data.num_rows, "collected_s": c, "files_s": f})
        source.unlink()
    spark.stop()
    console.print(table)
    return out


class Peaks:
    """Peak anonymous resident memory (heap, not the page cache of memory-mapped files) of this process
    and of its children (the Spark JVM), sampled every 50 ms from /proc."""

    def __init__(self) -> None:
        self.python = self.jvm = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    @staticmethod
    def _anon_mb(pid: int | str) -> int:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("RssAnon:"):
                    return int(line.split()[1]) // 1024
        except OSError:
            pass
        return 0

    def _sample(self) -> None:
        me = os.getpid()
        while not self._stop.wait(0.05):
            self.python = max(self.python, self._anon_mb(me))
            children = Path(f"/proc/{me}/task/{me}/children").read_text().split()
            self.jvm = max(self.jvm, sum(self._anon_mb(c) for c in children))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def worker(args: argparse.Namespace) -> None:
    """One task in this process (part 2): prints a JSON line of what happened."""
    work = Path(args.worker)
    spark = build_session("local[2]", {"spark.driver.memory": args.driver_memory}, work / "spark", "large-step-beyond")
    run = runner(spark, work / args.path, 0 if args.path == "files" else 1 << 50)
    source = work / "input.arrow"
    report: dict[str, Any] = {"path": args.path}
    peaks = Peaks()
    try:
        report["seconds"] = one_task(run, source, 1)
        report["ok"] = True
    except Exception as exc:
        report["ok"] = False
        report["error"] = one_line(exc, 240)
    peaks.stop()
    report["python_anon_mb"], report["jvm_anon_mb"] = peaks.python, peaks.jvm
    print(json.dumps(report), flush=True)
    spark.stop()


def beyond(args: argparse.Namespace, work: Path, console: Console) -> list[dict[str, Any]]:
    data = rows(args.beyond)
    write_ipc(work / "input.arrow", data)
    del data
    table = Table(title=f"one task of {args.beyond} MB, Spark driver memory {args.driver_memory}")
    for column in ("path", "finished", "seconds", "Python peak anon MB", "JVM peak anon MB", "error"):
        table.add_column(column)
    out = []
    for path in ("collected", "files"):
        done = subprocess.run([sys.executable, __file__, "--worker", str(work), "--path", path,
                               "--driver-memory", args.driver_memory], capture_output=True, text=True, timeout=3600)
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        last = (done.stderr.strip().splitlines() or [""])[-1]
        report = json.loads(lines[-1]) if lines else {"path": path, "ok": False,
                                                      "error": f"exit {done.returncode}: {last[:200]}"}
        table.add_row(path, "yes" if report["ok"] else "no", f"{report.get('seconds', 0):.1f}",
                      str(report.get("python_anon_mb", "")), str(report.get("jvm_anon_mb", "")), report.get("error", ""))
        out.append(report)
    console.print(table)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="4,32,128", help="part 1: input sizes in MB, comma separated")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--beyond", type=int, default=0, help="part 2: one task of this many MB (0: skip)")
    parser.add_argument("--driver-memory", default="512m", help="part 2: the Spark driver's heap")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--path", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    console = Console()
    with tempfile.TemporaryDirectory(prefix="large-step-") as tmp:
        work = Path(tmp)
        report = {"side_by_side": side_by_side(args, work, console) if args.sizes else []}
        if args.beyond:
            report["beyond"] = beyond(args, work, console)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
