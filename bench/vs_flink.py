"""ftpipeline against Apache Flink, side by side: the same input files, the same cores, one run.

Why: the engine fault-tolerant streaming users hold up as the reference is Flink, not Spark. Flink
runs here as its users run it at its best: 2.3.0 from PyPI (``apache-flink``, a whole Flink
distribution) in a virtualenv of its own under ``~/.cache/ftpipeline/flink-2.3.0`` (its pins differ
from ours), a standalone cluster of a JobManager and a TaskManager as processes (``bin/jobmanager.sh``,
``bin/taskmanager.sh``), RocksDB state, incremental exactly-once checkpoints every second (a common
choice for a job that must show output soon; ``--checkpoint-ms``), each workload one Flink SQL job of
built-in functions (``bench/flink_side.py`` says how each user function became SQL). The TaskManager
gets two slots per core it may use... two cores in all, as ftpipeline's two workers of ``local[1]``.

The workloads are ``bench/vs_spark.py``'s, read from JSON Lines on both sides (the clicks too: Flink's
Parquet format needs Hadoop's jars), ``--steps`` files' worth of ``--sizes`` rows each per source
channel. Three figures per workload and size:

* throughput: ours, rows of the measured steps (the first ``--warmup`` dropped) over the time they
  cover, from the run's summary, as in ``vs_spark.py``; Flink, reading the same files as one stream
  (it has no steps), the input rows after the same share of them over the time from the moment its
  source had emitted that share (polled from the REST API every 100 ms, metrics fetched as often)
  until every vertex's counts stop at their final values (processing; its final commit comes later);
  Flink reads the files ``k`` times over (links under other names) so that it streams at least
  ``--flink-rows`` rows: a few hundred thousand rows are over before its JIT has warmed up, and a
  user's job runs for hours; its appended rows are then ``k`` times ours;
* start-up to first output: process start (ours ``ftpipeline run``; Flink the JobManager's start,
  then the TaskManager's and the job's submission) until a committed file is in a sink directory;
* rows out, on appends equal on both sides; aggregates differ in form (ours a row per key updated in
  a step, Flink a changelog), so the distinct keys are compared.

    python bench/vs_flink.py [--workloads ...] [--sizes 5000 50000] [--steps 14] [--warmup 3]
                             [--pairs 1] [--checkpoint-ms 1000] [--json FILE]

The Kafka -> aggregate -> Kafka job and its produce -> ``read_committed`` latency against Flink's
exactly-once and at-least-once Kafka sinks are ``bench/latency.py``'s, and so is TaskManager SIGKILL
against our worker kill (``--kill-at-s``: kill -> a later event's row visible, on a live stream).
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
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
import vs_spark  # noqa: E402  (bench/ is not a package)
import vs_spark_workloads as workloads  # noqa: E402

FLINK_VERSION = "2.3.0"
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "ftpipeline" / f"flink-{FLINK_VERSION}"
FLINK_SIDE = Path(__file__).resolve().parent / "flink_side.py"
REST_PORT = 18091
WORKLOADS = workloads.WORKLOADS


# --- Flink: install, cluster, job --------------------------------------------------------------

def flink_python(console: Console) -> tuple[Path, Path]:
    """(python, FLINK_HOME) of the cached Flink virtualenv, made on first use."""
    venv = CACHE / "venv"
    python = venv / "bin" / "python"
    if not python.exists():
        with console.status(f"installing apache-flink {FLINK_VERSION} into {venv} (once) ..."):
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
            subprocess.run([str(python), "-m", "pip", "install", "-q", f"apache-flink=={FLINK_VERSION}"], check=True)
    home = subprocess.run([str(python), "-c", "import os, pyflink; print(os.path.dirname(pyflink.__file__))"],
                          check=True, capture_output=True, text=True).stdout.strip()
    return python, Path(home)


@dataclass
class Cluster:
    home: Path
    work: Path
    slots: int
    checkpoint_ms: int
    jars: tuple[Path, ...] = ()  # connectors beside Flink's own lib/ (the Kafka connector)
    env: dict[str, str] = field(default_factory=dict)

    def configure(self) -> None:
        conf = self.work / "conf"
        conf.mkdir(parents=True)
        for name in ("log4j.properties", "log4j-console.properties", "logback.xml"):
            if (self.home / "conf" / name).exists():
                shutil.copy(self.home / "conf" / name, conf / name)
        shipped = yaml.safe_load((self.home / "conf" / "config.yaml").read_text())
        settings = {
            "env": {"java": {"opts": {"all": shipped["env"]["java"]["opts"]["all"]}}},  # JDK 17's --add-opens
            "jobmanager.bind-host": "localhost", "jobmanager.rpc.address": "localhost", "jobmanager.rpc.port": 16133,
            "jobmanager.memory.process.size": "1g", "jobmanager.execution.failover-strategy": "region",
            "taskmanager.bind-host": "localhost", "taskmanager.host": "localhost",
            "taskmanager.numberOfTaskSlots": self.slots, "taskmanager.memory.process.size": "2g",
            "rest.address": "localhost", "rest.bind-address": "localhost", "rest.port": REST_PORT,
            "io.tmp.dirs": str(self.work / "tmp"), "state.backend.type": "rocksdb",
            "execution.checkpointing.dir": f"file://{self.work / 'checkpoints'}",
            "execution.checkpointing.incremental": True,
            "execution.checkpointing.interval": f"{self.checkpoint_ms}ms", "execution.checkpointing.mode": "EXACTLY_ONCE",
            "metrics.fetcher.update-interval": 100, "web.refresh-interval": 100,
        }
        (conf / "config.yaml").write_text(yaml.safe_dump(settings))
        for d in ("log", "pids", "tmp", "checkpoints"):
            (self.work / d).mkdir()
        self.env = dict(os.environ, FLINK_HOME=str(self.home), FLINK_CONF_DIR=str(conf),
                        FLINK_LOG_DIR=str(self.work / "log"), FLINK_PID_DIR=str(self.work / "pids"))
        if self.jars:  # a lib/ of links: Flink's jars and the connectors (the cluster and the client load it)
            lib = self.work / "lib"
            lib.mkdir()
            for jar in [*(self.home / "lib").glob("*.jar"), *self.jars]:
                (lib / jar.name).symlink_to(jar)
            self.env["FLINK_LIB_DIR"] = str(lib)

    def script(self, *args: str) -> None:
        subprocess.run(["bash", str(self.home / "bin" / args[0]), *args[1:]], env=self.env, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def start(self) -> None:
        self.script("jobmanager.sh", "start")
        self.script("taskmanager.sh", "start")
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            seen = rest("/overview")
            if seen and seen.get("taskmanagers", 0) >= 1 and seen.get("slots-total", 0) > 0:
                return
            time.sleep(0.2)
        raise RuntimeError(f"the Flink cluster did not come up: see {self.work / 'log'}")

    def kill_taskmanager(self) -> None:
        """SIGKILL the TaskManager and start a fresh one at once (as Kubernetes restarts its pod)."""
        self._kill("*taskexecutor*.pid", forget=True)
        self.script("taskmanager.sh", "start")

    def stop(self) -> None:
        self._kill("*.pid")

    def _kill(self, pidfiles: str, forget: bool = False) -> None:
        for pidfile in (self.work / "pids").glob(pidfiles):
            for line in pidfile.read_text().split():
                try:
                    os.kill(int(line), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
            if forget:
                pidfile.unlink()


def rest(path: str) -> Any:
    try:
        with urllib.request.urlopen(f"http://localhost:{REST_PORT}{path}", timeout=5) as reply:
            return json.loads(reply.read() or b"null")
    except (OSError, ValueError):
        return None


def follow(job: str, timeout_s: float = 1800) -> list[tuple[float, dict[str, tuple[int, int]]]]:
    """Poll the job every 100 ms until it finishes: (time, vertex -> (records read, records written))."""
    samples: list[tuple[float, dict[str, tuple[int, int]]]] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = rest(f"/jobs/{job}")
        if found:
            counts = {v["name"]: (v["metrics"].get("read-records", 0), v["metrics"].get("write-records", 0))
                      for v in found.get("vertices", [])}
            samples.append((time.monotonic(), counts))
            if found.get("state") == "FINISHED":
                return samples
            if found.get("state") in ("FAILED", "CANCELED"):
                problems = rest(f"/jobs/{job}/exceptions") or {}
                raise RuntimeError(f"Flink job {found.get('state')}: {str(problems.get('root-exception', ''))[:2000]}")
        time.sleep(0.1)
    raise RuntimeError(f"Flink job {job} did not finish in {timeout_s} s")


def flink_rate(samples: list[tuple[float, dict[str, tuple[int, int]]]], rows: int, warm_share: float) -> float:
    """Input rows per second after the first ``warm_share`` of them (see the module's docstring)."""
    final = samples[-1][1]
    source = next(name for name in final if name.startswith("Source"))
    emitted = final[source][1]
    warm = next(t for t, counts in samples if counts.get(source, (0, 0))[1] >= warm_share * emitted)
    done = next(t for t, counts in samples if counts == final)
    return rows * (1 - warm_share) / max(done - warm, 1e-3)


def committed_file(out: Path) -> bool:
    """A committed part file in a sink directory (Flink keeps in-progress ones hidden, ``.part-...``)."""
    return out.is_dir() and any(f.is_file() and f.name.startswith("part-") for sink in out.iterdir() if sink.is_dir()
                                for f in sink.iterdir())


def rows_and_keys(out: Path) -> dict[str, int]:
    """Per sink: rows of an append sink; distinct keys of a changelog (the row's first column(s))."""
    found: dict[str, int] = {}
    for sink in sorted(d for d in out.iterdir() if d.is_dir()) if out.is_dir() else []:
        lines = [json.loads(line) for f in sink.iterdir() if f.name.startswith("part-")
                 for line in f.read_text().splitlines() if line]
        if lines and "op" in lines[0]:
            found[sink.name] = len({_key(r.get("after") or r.get("before")) for r in lines})
        else:
            found[sink.name] = len(lines)
    return found


def _key(row: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(row[k] for k in ("country", "user_id") if k in row)


def repeated(data: Path, into: Path, times: int) -> Path:
    """``data``'s files ``times`` over, as links in ``into`` (step order kept within each round)."""
    into.mkdir(parents=True, exist_ok=True)
    for k in range(times):
        for f in sorted(data.iterdir()):
            (into / f"r{k:03d}-{f.name}").symlink_to(f)
    return into


def run_flink(python: Path, home: Path, workload: str, data: Path, work: Path, rows: int, warm_share: float,
              checkpoint_ms: int, cores: int) -> tuple[float, float, dict[str, int]]:
    """(rows/s, start-up to first output s, rows or keys per sink) of one Flink run on a fresh cluster;
    ``rows`` the rows ``data`` holds."""
    p = max(workloads.WIDE.values()) if workload == "many-channels" else cores
    sinks = [f"{k}={v}" for k, v in workloads.WIDE.items() if k in ("totals", "big")] if workload == "many-channels" else []
    cluster = Cluster(home, work / "flink", max(p, cores), checkpoint_ms)
    cluster.configure()
    out = work / "out"
    seen: list[float] = []
    stop = threading.Event()
    started = time.monotonic()

    def watch() -> None:
        while not stop.is_set():
            if committed_file(out):
                seen.append(time.monotonic() - started)
                return
            time.sleep(0.02)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        cluster.start()
        submitted = subprocess.run([str(python), str(FLINK_SIDE), workload, "--input", str(data), "--out", str(out),
                                    "--rest-port", str(REST_PORT), "--parallelism", str(p),
                                    "--checkpoint-ms", str(checkpoint_ms), "--sinks", *sinks],
                                   env=cluster.env, capture_output=True, text=True, timeout=600)
        if submitted.returncode != 0:
            said = (submitted.stdout + submitted.stderr).splitlines()
            raise RuntimeError("flink_side.py: " + "\n".join([line for line in said if "Exception:" in line][:5] + said[-5:]))
        job = json.loads(submitted.stdout.strip().splitlines()[-1])["job"]
        samples = follow(job)
        watcher.join(timeout=30)
    finally:
        stop.set()
        cluster.stop()
    return flink_rate(samples, rows, warm_share), (seen[0] if seen else float("nan")), rows_and_keys(out)


# --- ours ---------------------------------------------------------------------------------------

def run_ours(workload: str, data: Path, work: Path, size: int, steps: int, warmup: int, p: int) -> tuple[float, float, dict[str, int]]:
    pipeline = workloads.pipeline(work / "pipeline.yaml", workload, data, work / "out", size, steps, p,
                                  clicks_as="jsonl")
    side = vs_spark.run_ours(pipeline, work, size, warmup, [])
    return side.rate, side.startup, side.out_rows | ours_keys(work / "out", workload)


AGGREGATED = {"aggregate": ("output", ["user_id"]), "deep-chain": ("output", ["user_id"]),
              "six-stage": ("totals", ["country", "user_id"]), "many-channels": ("totals", ["country", "user_id"])}


def ours_keys(out: Path, workload: str) -> dict[str, int]:
    """The distinct keys an aggregate sink wrote (its rows are the keys each step updated)."""
    if workload not in AGGREGATED:
        return {}
    import pyarrow.dataset as ds

    sink, keys = AGGREGATED[workload]
    table = ds.dataset(out / sink, format="parquet").to_table(columns=keys)
    return {sink: table.group_by(keys).aggregate([]).num_rows}


# --- the comparison -----------------------------------------------------------------------------

@dataclass
class Result:
    workload: str
    rows_per_step: int
    ours_rows_s: float
    flink_rows_s: float
    ours_startup_s: float
    flink_startup_s: float
    ours_out: dict[str, int]
    flink_out: dict[str, int]
    flink_rounds: int  # times Flink read the input


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", nargs="+", choices=WORKLOADS, default=list(WORKLOADS))
    parser.add_argument("--sizes", nargs="+", type=int, default=[5000, 50000], help="rows per step")
    parser.add_argument("--steps", type=int, default=14)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--pairs", type=int, default=1, help="runs of each side, alternating which goes first")
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument("--checkpoint-ms", type=int, default=1000, help="Flink's exactly-once checkpoint interval")
    parser.add_argument("--flink-rows", type=int, default=1_000_000, help="rows Flink streams at least")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    console = Console()
    if not console.is_terminal:  # a log file: wide enough for the table
        console = Console(width=180)
    python, home = flink_python(console)
    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="vs-flink-") as scratch:
        tmp = Path(scratch)
        for size in args.sizes:
            for workload in args.workloads:
                kind = workloads.input_kind(workload, args.parallelism)
                data = tmp / f"in-{kind}-{size}"
                if not data.exists():
                    console.print(f"writing {args.steps} steps of {size:,} {kind} (JSON Lines) ...")
                    workloads.write_input(workload, data, size, args.steps, args.parallelism, clicks_as="jsonl")
                total = size * args.steps
                times = max(1, -(-args.flink_rows // total))
                flink_data = tmp / f"{data.name}-x{times}"
                if not flink_data.exists():
                    repeated(data, flink_data, times)
                ours: list[tuple[float, float, dict[str, int]]] = []
                flink: list[tuple[float, float, dict[str, int]]] = []
                for pair in range(args.pairs):
                    for side in (("ours", "flink") if pair % 2 == 0 else ("flink", "ours")):
                        work = vs_spark.fresh(tmp / f"{workload}-{size}-{side}")
                        if side == "ours":
                            ours.append(run_ours(workload, data, work, size, args.steps, args.warmup, args.parallelism))
                        else:
                            flink.append(run_flink(python, home, workload, flink_data, work, total * times,
                                                   args.warmup / args.steps, args.checkpoint_ms, args.parallelism))
                        got = ours[-1] if side == "ours" else flink[-1]
                        console.print(f"{workload} {size:,} rows/step, pair {pair + 1}, {side:5}: {got[0]:10,.0f} rows/s, "
                                      f"first output after {got[1]:.1f} s, out {got[2]}")
                results.append(Result(workload, size, statistics.median(o[0] for o in ours),
                                      statistics.median(f[0] for f in flink), statistics.median(o[1] for o in ours),
                                      statistics.median(f[1] for f in flink), ours[-1][2], flink[-1][2], times))
    shown = Table(title=f"ftpipeline vs Apache Flink {FLINK_VERSION}: {args.steps} steps' input, first {args.warmup} "
                        f"dropped, {args.pairs} pairs, 2 cores each, Flink checkpoints every {args.checkpoint_ms} ms")
    for column in ("workload", "rows/step", "ours rows/s", "Flink rows/s", "ours÷Flink", "first output ours / Flink s",
                   "rows out (appends) / keys (aggregates), ours | Flink (its input read k times)"):
        shown.add_column(column, justify="right" if column not in ("workload",) else "left")
    for r in results:
        shown.add_row(r.workload, f"{r.rows_per_step:,}", f"{r.ours_rows_s:,.0f}", f"{r.flink_rows_s:,.0f}",
                      f"{r.ours_rows_s / r.flink_rows_s:.2f}", f"{r.ours_startup_s:.1f} / {r.flink_startup_s:.1f}",
                      f"{r.ours_out} | {r.flink_out}, k={r.flink_rounds}")
    console.print(shown)
    if args.json:
        args.json.write_text(json.dumps([r.__dict__ for r in results], indent=2))


if __name__ == "__main__":
    main()
