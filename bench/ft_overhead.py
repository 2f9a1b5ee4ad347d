"""What fault tolerance costs: rows/s of the same pipeline with it on and off.

Runs the clickstream example through the real CLI, alternating
``faultTolerance: true`` and ``false`` (so drift in the machine's load hits
both sides alike), and prints steady-state throughput of each and their
ratio. Steady state excludes the first steps, which measure JVM warm-up
rather than the runtime: with fault tolerance on, that includes ZooKeeper's
JVM, which the run starts and which compiles its hot paths over the first
tens of seconds (about 1.5 s of CPU on two cores), so short runs overstate
the cost.

Each side runs with its defaults: with fault tolerance on, that includes a
checkpoint every 10 steps (``checkpoint.intervalSteps``'s default).

The headline is the median of the per-pair ratios: the two runs of a pair
are back to back, so slow drift of the machine cancels within a pair.

With ``--compare tls`` both sides run fault tolerant against a Redis and a
ZooKeeper of the benchmark's own on loopback TCP ports, as on Kubernetes, and
what alternates is TLS everywhere — worker traffic with mutual TLS (the
default), Redis and ZooKeeper serving TLS alone (``serve-redis``/
``serve-zookeeper --tls-dir``, the chart's default) — and no TLS anywhere
(``--plaintext-workers``, the same servers' plaintext twins): what encrypting
and authenticating every call, object transfer, lineage write and command-log
append costs.

    python bench/ft_overhead.py [--pairs 3] [--steps 60] [--warmup 15] [--rows 30000]
    python bench/ft_overhead.py --compare tls
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import redis
import yaml

from ftpipeline.commandlog.zkclient import connect
from ftpipeline.embedded.ports import free_port
from ftpipeline.obs.spans import busy_seconds, step_spans
from ftpipeline.worker.tls import generate

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "clickstream"


def pipeline(directory: Path, fault_tolerance: bool, steps: int, rows: int) -> Path:
    doc = yaml.safe_load((EXAMPLE / "pipeline.yaml").read_text())
    name = "bench-ft" if fault_tolerance else "bench-noft"
    doc["metadata"]["name"] = name
    spec = doc["spec"]
    spec["entryPoint"] = str(EXAMPLE / "clickstream.py")
    spec["faultTolerance"] = fault_tolerance
    spec["steps"]["maxSteps"] = steps
    for stage in spec["stages"]:
        if "source" in stage:
            stage["source"]["generator"]["rowsPerStep"] = rows
        if "sink" in stage:
            stage["sink"]["parquet"]["path"] = str(directory / name / "out")
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def run(path: Path, directory: Path, warmup: int, *extra: str, env: dict[str, str] | None = None) -> float:
    """Steady-state rows/s of one CLI run (the first ``warmup`` steps excluded); ``env``: its environment."""
    summary = directory / "summary.json"
    subprocess.run(
        [sys.executable, "-m", "ftpipeline.cli", "run", str(path), "--no-progress", "--overwrite",
         "--run-dir", str(directory / "run"), "--summary-json", str(summary), *extra],
        check=True, capture_output=True, env=env,
    )
    data = json.loads(summary.read_text())
    spans = step_spans(data["commit_at"], data["step_seconds"])[warmup:]
    rows_per_step = data["source_rows"] / data["committed"]
    return rows_per_step * len(spans) / busy_seconds(spans)  # steps overlap: their union, not their sum


@contextmanager
def stores(directory: Path, tls: bool) -> Iterator[list[str]]:
    """A Redis and a ZooKeeper on loopback TCP ports, serving TLS alone or plaintext; yields the run's flags."""
    rport, zport, probe = free_port(), free_port(), free_port()
    tls_args: list[str] = []
    redis_url, zookeeper = f"redis://127.0.0.1:{rport}/0", f"127.0.0.1:{zport}"
    if tls:
        certs = generate("bench-stores", ("localhost",)).write(directory / "tls")
        tls_args = ["--tls-dir", str(certs)]
        redis_url = f"rediss://localhost:{rport}/0?ssl_ca_certs={certs / 'ca.crt'}"
        zookeeper = f"localhost:{zport}?ca={certs / 'ca.crt'}"
    cli = [sys.executable, "-m", "ftpipeline.cli"]
    servers = [subprocess.Popen([*cli, "serve-redis", "--port", str(rport), "--bind", "127.0.0.1",
                                 "--dir", str(directory / "redis"), *tls_args], stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL),
               subprocess.Popen([*cli, "serve-zookeeper", "--port", str(zport), "--dir", str(directory / "zookeeper"),
                                 "--probe-port", str(probe), *tls_args], stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)]
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                redis.Redis.from_url(redis_url).ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        connect(zookeeper, start_timeout_s=60).stop()
        yield ["--redis-url", redis_url, "--zookeeper", zookeeper, *([] if tls else ["--plaintext-workers"])]
    finally:
        for server in servers:
            server.terminate()
            server.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=15)
    parser.add_argument("--rows", type=int, default=30000)
    parser.add_argument("--compare", choices=["ft", "tls"], default="ft",
                        help="what alternates: fault tolerance on/off, or (fault tolerant) TLS on/off")
    args = parser.parse_args()
    logging.getLogger("kazoo").setLevel(logging.CRITICAL)  # its retries while a ZooKeeper starts are expected
    what = "fault tolerance" if args.compare == "ft" else "TLS"
    on: list[float] = []
    off: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        for i in range(args.pairs):
            for side, results in ((True, on), (False, off)) if i % 2 == 0 else ((False, off), (True, on)):
                if args.compare == "ft":
                    rate = run(pipeline(d, side, args.steps, args.rows), d, args.warmup)
                else:
                    with stores(d / f"stores-{i}-{'tls' if side else 'plain'}", side) as flags:
                        rate = run(pipeline(d, True, args.steps, args.rows), d, args.warmup, *flags)
                results.append(rate)
                print(f"pair {i + 1}: {what} {'on ' if side else 'off'}: {rate:,.0f} rows/s", flush=True)
    m_on, m_off = statistics.median(on), statistics.median(off)
    print()
    print(f"{'':24}{'rows/s (median)':>18}{'runs':>8}")
    print(f"{what + ' on':24}{m_on:>18,.0f}{len(on):>8}")
    print(f"{what + ' off':24}{m_off:>18,.0f}{len(off):>8}")
    pairs = [a / b for a, b in zip(on, off)]
    print(f"per-pair ratios on/off: {', '.join(f'{r:.3f}' for r in pairs)}")
    print(f"ratio on/off: {statistics.median(pairs):.3f} (median of pairs; of the medians {m_on / m_off:.3f})   "
          f"(goal >= 0.95; {args.steps} steps of {args.rows:,} rows, first {args.warmup} excluded)")


if __name__ == "__main__":
    main()
