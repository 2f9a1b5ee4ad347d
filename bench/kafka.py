"""Kafka -> keyed aggregate -> Kafka: ftpipeline against Spark Structured Streaming, side by side.

Why: a team that streams from Kafka compares us with Spark's own Kafka connector. The job is
``examples/kafka-clickstream`` (clean -> per-user running totals), the same user function on
both sides, the same broker (the embedded one), two Spark cores each: ftpipeline two workers
of ``local[1]``, every stage two channels; SS ``local[2]`` with two shuffle partitions and its
RocksDB state store. Three figures, each side measured in turn (alternating who goes first):

* throughput: both read the same pre-filled topic (``--records``, two partitions) in steps of
  ``--per-step`` offsets (ours ``maxRecordsPerStep``, SS ``maxOffsetsPerTrigger``): rows of the
  measured steps over the time they cover (the first ``--warmup`` dropped), ours from the run
  summary's step spans, SS from its progress reports' ``triggerExecution``;
* end-to-end latency: a producer writes ``--rate`` events/s for ``--seconds``, each stamped
  with its produce time; a ``read_committed`` consumer of the output takes, for every output
  row, the time it became visible minus the row's ``last_seen_ms`` (the newest event folded
  into it): produce -> committed output visible, p50 and p99 after the first ``--warmup-s``;
* recovery: on a pre-filled topic, ours loses a worker mid-step ``--kill-step`` (the next
  commit's delay is the summary's ``to_commit_seconds``); SS's driver is SIGKILLed once batch
  ``--kill-step`` is committed and restarted on its checkpoint, timed from the kill to its next
  committed batch (SS restarts the query: JVM, plan, state).

    python bench/kafka.py [--records 200000] [--per-step 20000] [--pairs 2] [--rate 5000]
                          [--seconds 40] [--kill-step 4] [--json FILE]

Spark's Kafka connector is fetched from Maven Central (pinned by digest, below) into
``~/.cache/ftpipeline/spark-kafka-4.2.0``. 4.2.0, the Spark line of the PySpark ftpipeline runs on.
Spark's Kafka sink is at least once (it has no transactions), ours exactly once: the
comparison is of the work, not of the guarantee.
"""

from __future__ import annotations

import argparse
import functools
import gzip
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import yaml
from confluent_kafka import Consumer, Producer
from rich.console import Console
from rich.table import Table

from ftpipeline.embedded.kafka import EmbeddedKafka
from ftpipeline.embedded.jars import Jar, fetch
from ftpipeline.kafka.topics import create_topics, produce
from ftpipeline.obs.spans import busy_seconds, step_spans

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "kafka-clickstream"
SS_SIDE = Path(__file__).resolve().parent / "ss_kafka_side.py"
CONNECTOR = [
    Jar("org.apache.spark", "spark-sql-kafka-0-10_2.13", "4.2.0",
        "64539c45e5d39f7ddb747312c239f38f5208d08c1a0ddf7d70beb2fbd9373705"),
    Jar("org.apache.spark", "spark-token-provider-kafka-0-10_2.13", "4.2.0",
        "641c7947afc8aa1189e433b7c2d305293993c8691bc1c2062d6d4f513b12518c"),
    Jar("org.apache.kafka", "kafka-clients", "3.9.2", "014b4ef36884478a932641818b080c36a8f8e2e92dc771e800c9d2694f4f83d8"),
    Jar("org.apache.commons", "commons-pool2", "2.13.1", "f77a5060d6936a9144023584232f9de3f2248f1abfe156e9d31795f18770674f"),
]


def connector_jars() -> str:
    directory = Path.home() / ".cache" / "ftpipeline" / "spark-kafka-4.2.0"
    fetch(directory, CONNECTOR)
    return ",".join(str(directory / j.file) for j in CONNECTOR)


@functools.cache
def _example_events() -> list[dict[str, Any]]:
    """The well-formed events of the example's input, read once (the live producer asks every 10 ms)."""
    return [json.loads(line) for line in gzip.decompress((EXAMPLE / "clicks.jsonl.gz").read_bytes()).splitlines()
            if line.startswith(b"{") and b'"free"' not in line]


def events(count: int, stamp: bool = False) -> list[bytes]:
    """``count`` well-formed events of the example's input, repeated as needed (ids kept distinct)."""
    base = _example_events()
    out = []
    for i in range(count):
        event = dict(base[i % len(base)], event_id=f"e{i}")
        if stamp:
            event["ts_ms"] = int(time.time() * 1000)
        out.append(json.dumps(event, separators=(",", ":")).encode())
    return out


def pipeline(path: Path, bootstrap: str, name: str, per_step: int, bounded: bool) -> Path:
    doc = yaml.safe_load((EXAMPLE / "pipeline.yaml").read_text())
    doc["metadata"]["name"] = name
    spec = doc["spec"]
    spec["entryPoint"] = str(EXAMPLE / "clickstream.py")
    spec["kafka"] = {"bootstrapServers": bootstrap}
    spec["deadLetter"] = {"path": str(path.parent / "dead-letter")}
    spec["checkpoint"] = {"intervalSteps": 10, "storage": {"path": str(path.parent / "checkpoints")}}
    for stage in spec["stages"]:
        if "source" in stage:
            stage["source"]["kafka"].update(topic=f"{name}-in", maxRecordsPerStep=per_step)
            if not bounded:
                del stage["source"]["kafka"]["endingOffsets"]
        if "sink" in stage:
            stage["sink"]["kafka"]["topic"] = f"{name}-out"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def ours_command(pipeline_file: Path, work: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "ftpipeline.cli", "run", str(pipeline_file), "--no-progress",
            "--run-dir", str(work / "run"), "--summary-json", str(work / "summary.json"), *extra]


def ss_command(pipeline_file: Path, bootstrap: str, jars: str, work: Path, *extra: str) -> list[str]:
    return [sys.executable, str(SS_SIDE), str(pipeline_file), "--bootstrap", bootstrap, "--jars", jars,
            "--work", str(work), *extra]


def check(done: subprocess.CompletedProcess[str], what: str) -> None:
    if done.returncode != 0:
        raise RuntimeError(f"{what} exited with {done.returncode}:\n" + "\n".join(
            (done.stdout + done.stderr).splitlines()[-30:]))


# --- throughput -------------------------------------------------------------------------------

def throughput_ours(pipeline_file: Path, work: Path, warmup: int) -> float:
    check(subprocess.run(ours_command(pipeline_file, work), capture_output=True, text=True), "ftpipeline run")
    summary = json.loads((work / "summary.json").read_text())
    spans = step_spans(summary["commit_at"], summary["step_seconds"])
    rows = summary["source_rows"] * (len(spans) - warmup) / len(spans)  # steps read equal shares
    return rows / busy_seconds(spans[warmup:])


def throughput_ss(pipeline_file: Path, bootstrap: str, jars: str, work: Path, warmup: int) -> float:
    result = work / "progress.json"
    check(subprocess.run(ss_command(pipeline_file, bootstrap, jars, work, "--available-now", "--result",
                                    str(result)), capture_output=True, text=True), "Spark Structured Streaming")
    reports = [p for p in json.loads(result.read_text()) if p.get("numInputRows", 0) > 0][warmup:]
    from datetime import datetime

    spans = [(datetime.fromisoformat(p["timestamp"]).timestamp(),
              datetime.fromisoformat(p["timestamp"]).timestamp() + p["durationMs"]["triggerExecution"] / 1000)
             for p in reports]
    return sum(p["numInputRows"] for p in reports) / busy_seconds(spans)


# --- latency ----------------------------------------------------------------------------------

def produce_live(bootstrap: str, topic: str, rate: int, seconds: float, stop: threading.Event) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    start, sent = time.monotonic(), 0
    while not stop.is_set() and time.monotonic() - start < seconds:
        due = int((time.monotonic() - start) * rate)
        for value in events(max(0, due - sent), stamp=True):
            producer.produce(topic, value=value)
        sent = max(sent, due)
        producer.poll(0)
        time.sleep(0.01)
    producer.flush(30)


def watch_output(bootstrap: str, topic: str, after_ms: int, stop: threading.Event, out: list[float]) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{topic}", "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    consumer.subscribe([topic])
    while not stop.is_set():
        # consume() waits for its whole batch or the timeout: a long one would add to every latency
        batch = consumer.consume(1000, timeout=0.005)
        visible = time.time() * 1000
        for m in batch:
            if m.error() is None:
                seen = json.loads(m.value()).get("last_seen_ms", 0)
                if seen >= after_ms:
                    out.append(visible - seen)
    consumer.close()


def latency(run: Any, bootstrap: str, name: str, rate: int, seconds: float, warmup_s: float) -> list[float]:
    """Latencies (ms) of the output rows while ``run()`` (which returns a started process) runs."""
    stop, latencies = threading.Event(), []
    process = run()
    time.sleep(15)  # the side starts (JVMs) before events flow: its start is not latency
    after = int((time.time() + warmup_s) * 1000)
    threads = [threading.Thread(target=produce_live, args=(bootstrap, f"{name}-in", rate, seconds, stop)),
               threading.Thread(target=watch_output, args=(bootstrap, f"{name}-out", after, stop, latencies))]
    for t in threads:
        t.start()
    threads[0].join()
    time.sleep(5)  # what was produced last gets out
    stop.set()
    threads[1].join()
    process.send_signal(signal.SIGINT)
    try:
        process.wait(60)
    except subprocess.TimeoutExpired:
        process.kill()
    return latencies


# --- recovery ---------------------------------------------------------------------------------

def recovery_ours(pipeline_file: Path, work: Path, kill_step: int, seed: int) -> float:
    check(subprocess.run(ours_command(pipeline_file, work, "--kill-at-step", str(kill_step), "--seed", str(seed)),
                         capture_output=True, text=True), "ftpipeline run with a kill")
    [first, *_] = json.loads((work / "summary.json").read_text())["recoveries"]
    return float(first["to_commit_seconds"])


def recovery_ss(pipeline_file: Path, bootstrap: str, jars: str, work: Path, kill_step: int) -> float:
    commits = work / "checkpoint" / "commits"
    process = subprocess.Popen(ss_command(pipeline_file, bootstrap, jars, work, "--available-now"),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 600
    while not (commits / str(kill_step - 1)).exists():  # batch ids count from 0
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"Spark never committed batch {kill_step - 1}")
        time.sleep(0.01)
    process.kill()
    killed = time.monotonic()
    process.wait()
    done = {p.name for p in commits.iterdir()}
    restarted = subprocess.Popen(ss_command(pipeline_file, bootstrap, jars, work, "--available-now"),
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while not ({p.name for p in commits.iterdir() if not p.name.startswith(".")} - done):
        if restarted.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("Spark never committed a batch after its restart")
        time.sleep(0.01)
    seconds = time.monotonic() - killed
    restarted.wait()
    return seconds


# --- the run ----------------------------------------------------------------------------------

def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--per-step", type=int, default=20_000)
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=2, help="steps dropped from the throughput")
    parser.add_argument("--rate", type=int, default=5_000, help="events/s of the latency run")
    parser.add_argument("--seconds", type=float, default=40.0, help="how long the latency run produces")
    parser.add_argument("--warmup-s", type=float, default=10.0, help="latency: rows of events older are dropped")
    parser.add_argument("--kill-step", type=int, default=4)
    parser.add_argument("--skip", nargs="*", default=[], choices=["throughput", "latency", "recovery"])
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    console = Console()
    jars = connector_jars()
    results: dict[str, dict[str, list[float]]] = {k: {"ours": [], "spark": []}
                                                 for k in ("throughput", "latency_p50", "latency_p99", "recovery")}
    with tempfile.TemporaryDirectory(prefix="bench-kafka-") as tmp:
        broker = EmbeddedKafka(Path(tmp) / "broker").start()
        try:
            run = 0
            for pair in range(args.pairs):
                for side in (("ours", "spark") if pair % 2 == 0 else ("spark", "ours")):
                    run += 1
                    work = Path(tmp) / f"r{run}"
                    work.mkdir()

                    def job(name: str, bounded: bool) -> Path:
                        """Topics of its own (a bounded job's input written first) and its pipeline file."""
                        create_topics(broker.bootstrap, {f"{name}-in": 2, f"{name}-out": 2})
                        if bounded:
                            produce(broker.bootstrap, f"{name}-in", events(args.records))
                        return pipeline(work / f"{name}.yaml", broker.bootstrap, name, args.per_step, bounded)

                    if "throughput" not in args.skip:
                        bounded = job(f"r{run}", bounded=True)
                        rate = (throughput_ours(bounded, work / "t", args.warmup) if side == "ours" else
                                throughput_ss(bounded, broker.bootstrap, jars, work / "t", args.warmup))
                        results["throughput"][side].append(rate)
                        console.log(f"{side}: {rate:,.0f} rows/s")
                    if "recovery" not in args.skip:
                        killed = job(f"r{run}k", bounded=True)
                        seconds = (recovery_ours(killed, work / "k", args.kill_step, pair) if side == "ours" else
                                   recovery_ss(killed, broker.bootstrap, jars, work / "k", args.kill_step))
                        results["recovery"][side].append(seconds)
                        console.log(f"{side}: kill -> next commit {seconds:.2f} s")
                    if "latency" not in args.skip:
                        name = f"r{run}l"
                        live = job(name, bounded=False)
                        (work / "l").mkdir()
                        cmd = (ours_command(live, work / "l") if side == "ours" else
                               ss_command(live, broker.bootstrap, jars, work / "l", "--seconds", "3600"))
                        found = latency(lambda: subprocess.Popen(cmd, stdout=subprocess.DEVNULL,
                                                                 stderr=subprocess.DEVNULL),
                                        broker.bootstrap, name, args.rate, args.seconds, args.warmup_s)
                        if found:
                            ordered = sorted(found)
                            results["latency_p50"][side].append(ordered[len(ordered) // 2])
                            results["latency_p99"][side].append(ordered[int(len(ordered) * 0.99)])
                            console.log(f"{side}: latency p50 {ordered[len(ordered) // 2]:.0f} ms over {len(found)} rows")
        finally:
            broker.stop()
    table = Table(title="Kafka -> aggregate -> Kafka: ftpipeline vs Spark Structured Streaming (medians)")
    for column in ("figure", "ftpipeline", "Spark SS", "ours / SS"):
        table.add_column(column)
    summary: dict[str, Any] = {}
    for figure, sides in results.items():
        if sides["ours"] and sides["spark"]:
            ours, spark = statistics.median(sides["ours"]), statistics.median(sides["spark"])
            summary[figure] = {"ours": sides["ours"], "spark": sides["spark"], "ratio": ours / spark}
            table.add_row(figure, f"{ours:,.2f}", f"{spark:,.2f}", f"{ours / spark:.3f}")
    console.print(table)
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
