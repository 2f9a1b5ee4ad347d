"""Exactly-once latency: an event's produce time to its output being visible to a ``read_committed`` consumer.

Why: the place nobody holds is exactly-once output visible within tens of milliseconds. This
measures it, side by side in one run, for Kafka -> (a stateless chain; a keyed running aggregate)
-> Kafka, the job of ``examples/kafka-clickstream`` (``clean_events``, then per-user totals or
straight out), with a steady producer at each ``--rates`` events/s:

* ftpipeline (``ftpipeline run``, two workers, steps triggered as records arrive, Kafka
  transactions committed at each step's release: exactly once);
* Spark Structured Streaming (``bench/ss_kafka_side.py``: micro-batches back to back; Spark's Kafka
  sink is at least once) and, for the stateless chain, Spark's real-time mode (``--ss-real-time``,
  what PySpark 4.2 offers for a stateless Kafka query; a row if it runs, else the reason);
* Apache Flink 2.3 (``bench/flink_kafka_side.py``, Flink SQL, a standalone JobManager and
  TaskManager, RocksDB state): exactly once (Kafka transactions committed when a checkpoint
  completes; at ``--flink-checkpoint-ms``, the smallest interval its checkpoints keep up with here)
  and at least once.

Each event is stamped with its produce time (``ts_ms``); an output row carries the newest event it
folds in (``ts_ms`` of a stateless row, ``last_seen_ms`` of a total), so its latency is the time
the consumer saw it minus that stamp. Rows of events older than ``--warmup-s`` after the stream
starts are dropped (each system is up and warm before the producer starts). The systems take turns,
each its own topics, the order alternating from one rate to the next; p50, p99 and p99.9 in ms.

``--kill-at-s S``: a process is SIGKILLed S seconds into the stream, and the run reports the time
from the kill until a row of an event produced after the kill is visible (the whole path working
again, output committed). Ours loses one worker (its process group: sidecar, executor and Spark's
JVM, as a deleted pod); Flink its TaskManager, and a fresh one is started at once (what Kubernetes
does for a TaskManager pod, less the pod's scheduling; Flink's heartbeat settings as shipped, region
failover, restart from the last completed checkpoint); Spark SS (``ss``) its whole driver, restarted
at once on its checkpoint, as ``bench/vs_spark.py --recovery`` does.

    python bench/latency.py [--shapes stateless aggregate] [--rates 1000 10000 50000] [--seconds 30]
                            [--warmup-s 8] [--systems ours ss flink-eo flink-alo] [--kill-at-s S] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import yaml
from confluent_kafka import Consumer, Producer
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
import kafka as kafka_bench  # noqa: E402  (bench/ is not a package)
import vs_flink  # noqa: E402
import vs_spark  # noqa: E402

from ftpipeline.embedded.jars import Jar, fetch  # noqa: E402
from ftpipeline.embedded.kafka import EmbeddedKafka  # noqa: E402
from ftpipeline.kafka.topics import create_topics  # noqa: E402

FLINK_KAFKA = Jar("org.apache.flink", "flink-sql-connector-kafka", "5.0.0-2.2",
                  "5605c691d11a501382c383fecba37a7a552467da5ab7ba904ef5d6f3d62c5616")
FLINK_SIDE = Path(__file__).resolve().parent / "flink_kafka_side.py"
SYSTEMS = ("ours", "ss", "ss-real-time", "flink-eo", "flink-alo")
STAMP = {"stateless": re.compile(rb'"ts_ms":\s*(\d+)'), "aggregate": re.compile(rb'"last_seen_ms":\s*(\d+)')}
START_S = 25.0  # a side's start (JVMs, plans) before the stream begins: not latency


class Running(Protocol):
    def stop(self) -> None: ...

    def why(self) -> str: ...

    def kill(self) -> str:
        """SIGKILL the part a fault takes (and start what its platform would restart); what was killed."""
        ...


# --- the stream ---------------------------------------------------------------------------------

def produce(bootstrap: str, topic: str, rate: int, seconds: float, sent: list[int]) -> None:
    """``rate`` events/s for ``seconds``, each stamped with its produce time; ``sent`` gets the count."""
    templates = []  # the example's events with a place for an id and the produce time: cheap at 50k/s
    for line in kafka_bench.events(5000):
        event = dict(json.loads(line), event_id="@ID@", ts_ms=-1)
        text = json.dumps(event, separators=(",", ":")).encode().replace(b"%", b"%%")
        templates.append(text.replace(b'"@ID@"', b'"e%(id)d"').replace(b'"ts_ms":-1', b'"ts_ms":%(ts)d'))
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 2})
    start, n = time.monotonic(), 0
    while time.monotonic() - start < seconds:
        due = int((time.monotonic() - start) * rate)
        now_ms = int(time.time() * 1000)
        while n < due:
            producer.produce(topic, value=templates[n % len(templates)] % {b"id": n, b"ts": now_ms})
            n += 1
        producer.poll(0)
        time.sleep(0.002)
    producer.flush(30)
    sent.append(n)


def watch(bootstrap: str, topic: str, shape: str, after_ms: int, stop: threading.Event,
          out: list[tuple[float, int]]) -> None:
    """Every output row seen: (the wall time it became visible, in ms; its newest event's stamp)."""
    stamp = STAMP[shape]
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"latency-{topic}", "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    consumer.subscribe([topic])
    while not stop.is_set():
        batch = consumer.consume(5000, timeout=0.005)  # a short wait: consume() waits for a full batch or this
        visible = time.time() * 1000
        for m in batch:
            found = stamp.search(m.value() or b"") if m.error() is None else None
            if found is not None and int(found.group(1)) >= after_ms:
                out.append((visible, int(found.group(1))))
    consumer.close()


@dataclass
class Measured:
    latencies: list[float]  # ms, one per output row
    sent: int
    killed: str = ""  # what --kill-at-s killed
    kill_to_visible_s: float | None = None  # the kill until a row of a later event is visible


def measure(start: Any, bootstrap: str, name: str, shape: str, rate: int, seconds: float,
            warmup_s: float, kill_at_s: float | None = None) -> Measured:
    """The output rows' latencies while the side ``start()`` started runs, the events sent, and with
    ``kill_at_s`` the time from a kill that many seconds into the stream to a later event's row."""
    running: Running = start()
    try:
        time.sleep(START_S)
        after = int((time.time() + warmup_s) * 1000)
        stop = threading.Event()
        rows: list[tuple[float, int]] = []
        sent: list[int] = []
        watcher = threading.Thread(target=watch, args=(bootstrap, f"{name}-out", shape, after, stop, rows))
        watcher.start()
        killed: list[tuple[str, float]] = []
        if kill_at_s is not None:
            timer = threading.Timer(kill_at_s, lambda: killed.append((running.kill(), time.time() * 1000)))
            timer.start()
        produce(bootstrap, f"{name}-in", rate, seconds, sent)
        time.sleep(5 if kill_at_s is None else 30)  # what was produced last gets out (after a recovery too)
        stop.set()
        watcher.join()
        if not rows:
            raise RuntimeError(f"no output row seen: {running.why()}")
        found = Measured([visible - stamp for visible, stamp in rows], sent[0])
        if killed:
            found.killed, at = killed[0]
            later = [visible for visible, stamp in rows if stamp > at]
            found.kill_to_visible_s = (min(later) - at) / 1000 if later else None
        return found
    finally:
        running.stop()


# --- the sides ------------------------------------------------------------------------------------

class Process:
    def __init__(self, command: list[str], log: Path, workers: Path | None = None) -> None:
        self.command, self.log, self.workers = command, log, workers
        self.process = subprocess.Popen(command, stdout=log.open("w"), stderr=subprocess.STDOUT,
                                        start_new_session=workers is None)

    def kill(self) -> str:
        """Ours (``workers``: the run's workers directory): one worker's process group, as a deleted pod.
        Spark's: the driver's whole session, then the same command again (it resumes from its checkpoint)."""
        if self.workers is not None:
            worker = sorted(self.workers.glob("*/pgid"))[0]
            os.killpg(int(worker.read_text().split()[0]), signal.SIGKILL)
            return f"worker {worker.parent.name}"
        vs_spark.kill_group(self.process)
        self.process = subprocess.Popen(self.command, stdout=self.log.open("a"), stderr=subprocess.STDOUT,
                                        start_new_session=True)
        return "the driver, restarted"

    def why(self) -> str:
        said = self.log.read_text(errors="replace").splitlines()
        errors = [line for line in said if "Exception" in line or "Error" in line or "failed" in line]
        return " | ".join((errors or said)[-3:])[:600]

    def stop(self) -> None:
        self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            if self.workers is None:
                vs_spark.kill_group(self.process)  # the driver's whole session
            else:
                self.process.kill()
                self.process.wait()


class FlinkJob:
    """A fresh standalone cluster with the job submitted; stopped with the cluster."""

    def __init__(self, python: Path, home: Path, work: Path, shape: str, bootstrap: str, name: str,
                 delivery: str, checkpoint_ms: int) -> None:
        jars = work.parent / "flink-jars"
        fetch(jars, [FLINK_KAFKA])
        self.cluster = vs_flink.Cluster(home, work, 2, checkpoint_ms, jars=(jars / FLINK_KAFKA.file,))
        self.cluster.configure()
        self.cluster.start()
        submitted = subprocess.run([str(python), str(FLINK_SIDE), shape, "--bootstrap", bootstrap,
                                    "--topic-in", f"{name}-in", "--topic-out", f"{name}-out",
                                    "--rest-port", str(vs_flink.REST_PORT), "--checkpoint-ms", str(checkpoint_ms),
                                    "--delivery", delivery], env=self.cluster.env, capture_output=True, text=True,
                                   timeout=600)
        if submitted.returncode != 0:
            self.cluster.stop()
            said = (submitted.stdout + submitted.stderr).splitlines()
            raise RuntimeError("flink_kafka_side.py: " + "\n".join(
                [line for line in said if "Exception:" in line][:5] + said[-5:]))

    def stop(self) -> None:
        self.cluster.stop()

    def kill(self) -> str:
        self.cluster.kill_taskmanager()
        return "the TaskManager, a fresh one started"

    def why(self) -> str:
        return f"see the Flink logs in {self.cluster.work / 'log'}"


def pipeline(work: Path, bootstrap: str, name: str, shape: str) -> Path:
    """The example's pipeline on topics of its own; ``stateless``: its cleaned events go straight out."""
    path = kafka_bench.pipeline(work / f"{name}.yaml", bootstrap, name, 20_000, bounded=False)
    if shape == "stateless":
        doc = yaml.safe_load(path.read_text())
        stages = [s for s in doc["spec"]["stages"] if "aggregate" not in s]
        for stage in stages:
            if "sink" in stage:
                stage["inputs"] = [{"stage": "clean"}]
        doc["spec"]["stages"] = stages
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def starter(system: str, shape: str, work: Path, bootstrap: str, name: str, args: argparse.Namespace,
            flink: tuple[Path, Path] | None, jars: str) -> Any:
    spec = pipeline(work, bootstrap, name, shape)
    log = work / f"{name}.log"
    if system == "ours":
        return lambda: Process(kafka_bench.ours_command(spec, work / name), log, work / name / "run" / "workers")
    if system in ("ss", "ss-real-time"):
        extra = ["--seconds", "3600", *(["--real-time", args.ss_real_time] if system == "ss-real-time" else [])]
        return lambda: Process(kafka_bench.ss_command(spec, bootstrap, jars, work / name, *extra), log)
    assert flink is not None
    delivery = "exactly-once" if system == "flink-eo" else "at-least-once"
    return lambda: FlinkJob(flink[0], flink[1], work / name / "flink", shape, bootstrap, name, delivery,
                            args.flink_checkpoint_ms)


def quantile(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="+", choices=["stateless", "aggregate"], default=["stateless", "aggregate"])
    parser.add_argument("--rates", nargs="+", type=int, default=[1000, 10_000, 50_000])
    parser.add_argument("--seconds", type=float, default=30.0, help="how long the producer writes")
    parser.add_argument("--warmup-s", type=float, default=8.0)
    parser.add_argument("--systems", nargs="+", choices=SYSTEMS, default=list(SYSTEMS))
    parser.add_argument("--flink-checkpoint-ms", type=int, default=200)
    parser.add_argument("--ss-real-time", default="5 minutes", help="real-time mode's batch duration")
    parser.add_argument("--kill-at-s", type=float, metavar="S",
                        help="SIGKILL a worker (ours), the TaskManager (Flink) or the driver (SS) S seconds into "
                             "the stream, and time the kill until a later event's row is visible")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    console = Console()
    if not console.is_terminal:  # a log file: wide enough for the table
        console = Console(width=200)
    flink = vs_flink.flink_python(console) if any(s.startswith("flink") for s in args.systems) else None
    jars = kafka_bench.connector_jars() if any(s.startswith("ss") for s in args.systems) else ""
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-latency-") as tmp:
        broker = EmbeddedKafka(Path(tmp) / "broker").start()
        try:
            turn = 0
            for shape in args.shapes:
                for rate in args.rates:
                    systems = [s for s in args.systems if not (s == "ss-real-time" and shape != "stateless")]
                    for system in (systems if turn % 2 == 0 else systems[::-1]):
                        name = f"t{len(results)}"
                        work = Path(tmp) / name
                        work.mkdir()
                        create_topics(broker.bootstrap, {f"{name}-in": 2, f"{name}-out": 2})
                        row: dict[str, Any] = {"shape": shape, "rate": rate, "system": system}
                        try:
                            got = measure(starter(system, shape, work, broker.bootstrap, name, args, flink, jars),
                                          broker.bootstrap, name, shape, rate, args.seconds, args.warmup_s,
                                          args.kill_at_s)
                            ordered = sorted(got.latencies)
                            row |= {"rows": len(ordered), "sent_per_s": got.sent / args.seconds,
                                    "p50": quantile(ordered, 0.5), "p99": quantile(ordered, 0.99),
                                    "p999": quantile(ordered, 0.999), "killed": got.killed,
                                    "kill_to_visible_s": got.kill_to_visible_s}
                            console.log(f"{shape} {rate}/s {system}: p50 {row['p50']:.0f} p99 {row['p99']:.0f} "
                                        f"p99.9 {row['p999']:.0f} ms over {len(ordered)} rows"
                                        + (f"; killed {got.killed}: {got.kill_to_visible_s} s to a later event's row"
                                           if got.killed else ""))
                        except Exception as exc:  # a side that cannot run this (real-time mode): say why
                            row["error"] = " ".join(str(exc).split())[:400]
                            console.log(f"{shape} {rate}/s {system}: [red]{row['error']}[/red]")
                        results.append(row)
                    turn += 1
        finally:
            broker.stop()
    killing = args.kill_at_s is not None
    table = Table(title="produce -> visible to read_committed (ms)"
                        + (f", a kill {args.kill_at_s:g} s into the stream" if killing else ""))
    columns = ["shape", "events/s", "system", "p50", "p99", "p99.9", "rows", "sent/s", "p99 / ours"]
    for column in columns + (["killed", "kill -> later event visible (s)", "÷ ours"] if killing else []):
        table.add_column(column)
    ours = {(r["shape"], r["rate"]): r for r in results if r["system"] == "ours" and "error" not in r}
    for r in results:
        if "error" in r:
            table.add_row(r["shape"], str(r["rate"]), r["system"], r["error"][:60], *[""] * (len(table.columns) - 4))
            continue
        base = ours.get((r["shape"], r["rate"]), {})
        cells = [r["shape"], f"{r['rate']:,}", r["system"], f"{r['p50']:.0f}", f"{r['p99']:.0f}",
                 f"{r['p999']:.0f}", f"{r['rows']:,}", f"{r['sent_per_s']:,.0f}",
                 f"{r['p99'] / base['p99']:.2f}" if base else ""]
        if killing:
            took, theirs = r["kill_to_visible_s"], base.get("kill_to_visible_s")
            cells += [r["killed"], f"{took:.2f}" if took is not None else "never",
                      f"{took / theirs:.1f}" if took is not None and theirs else ""]
        table.add_row(*cells)
    console.print(table)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
