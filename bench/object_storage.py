"""What object storage costs: rows/s of the same pipeline with its checkpoints and output in a local directory and
in an S3 bucket, side by side in one run.

Each pair runs the pipeline twice through the real CLI, once with every
location a local directory and once with every location an ``s3://`` URI on
a real S3 server on this machine (the embedded Versity S3 Gateway, started
once by the benchmark and reached as an external endpoint, so no run pays its
start), alternating which goes first. Printed: each side's steady-state
rows/s (the first ``--warmup`` steps excluded: JVM warm-up) and the median of
the per-pair ratios s3/local (goal >= 0.9), and the CPU seconds the S3
server itself used during each run: here it shares the machine's cores
with the pipeline, which a store on other machines would not.

Shapes (``--shape``):

- ``clickstream``: the example: 3 channels a stage, a hash edge into a
  keyed aggregate, one Parquet sink, RocksDB state checkpointed every 5 steps;
- ``wide``: more channels than cores (6 a stage on 3 workers, 2 cores) and
  two sinks: the aggregate's, and every cleaned event (the most bytes a step
  puts into the store), checkpoints every 5 steps.

    python bench/object_storage.py [--pairs 5] [--steps 80] [--warmup 10] [--rows 30000] [--shape wide]

Pairs of one machine vary by +-0.1 between them (two cores shared by three
workers, their JVMs, the coordinator, Redis, ZooKeeper and the S3 server):
the default of five pairs of 70 measured steps each is what the median of
pairs needs to be read to a few hundredths rather than a tenth.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

import yaml

from ftpipeline.embedded.s3 import EmbeddedS3

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from ft_overhead import run as measure  # noqa: E402  (steady-state rows/s of one CLI run)

ROOT = BENCH.parent
EXAMPLE = ROOT / "examples" / "clickstream"


def pipeline(directory: Path, where: str, shape: str, steps: int, rows: int, run: int) -> Path:
    """The shape with every location under ``where`` (a directory, or ``s3://bucket/prefix``)."""
    doc = yaml.safe_load((EXAMPLE / "pipeline.yaml").read_text())
    name = f"bench-{shape}"
    doc["metadata"]["name"] = name
    spec = doc["spec"]
    spec["entryPoint"] = str(EXAMPLE / "clickstream.py")
    spec["steps"]["maxSteps"] = steps
    spec["checkpoint"] = {"intervalSteps": 5, "storage": {"path": f"{where}/r{run}/checkpoints"}}
    stages = spec["stages"]
    for stage in stages:
        if "source" in stage:
            stage["source"]["generator"]["rowsPerStep"] = rows
        if "sink" in stage:
            stage["sink"]["parquet"]["path"] = f"{where}/r{run}/out"
    if shape == "wide":
        spec["workers"] = 3
        for stage in stages:
            stage["parallelism"] = 6
        stages.append({"name": "raw", "parallelism": 6, "inputs": [{"stage": "clean"}],
                       "sink": {"parquet": {"path": f"{where}/r{run}/raw"}}})
    path = directory / f"{name}-{run}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of a process so far (``/proc/<pid>/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--rows", type=int, default=30000)
    parser.add_argument("--shape", choices=["clickstream", "wide"], default="clickstream")
    args = parser.parse_args()
    local: list[float] = []
    s3: list[float] = []
    server_cpu: list[float] = []
    with tempfile.TemporaryDirectory() as tmp, EmbeddedS3(Path(tmp) / "s3") as server:
        d = Path(tmp)
        server.create_bucket("bench")
        s3_env = {**os.environ, **server.config.to_env()}
        plain_env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        run = 0
        for i in range(args.pairs):
            order = [("local", local), ("s3", s3)] if i % 2 == 0 else [("s3", s3), ("local", local)]
            for side, results in order:
                run += 1
                where = str(d / "local") if side == "local" else "s3://bench/runs"
                assert server._proc is not None
                before = cpu_seconds(server._proc.pid)
                rate = measure(pipeline(d, where, args.shape, args.steps, args.rows, run), d, args.warmup,
                               env=s3_env if side == "s3" else plain_env)
                results.append(rate)
                used = cpu_seconds(server._proc.pid) - before
                if side == "s3":
                    server_cpu.append(used)
                print(f"pair {i + 1}: {side:5} {rate:>10,.0f} rows/s" + (f"  (S3 server CPU {used:.1f} s)"
                                                                          if side == "s3" else ""), flush=True)
    pairs = [a / b for a, b in zip(s3, local)]
    print()
    print(f"shape {args.shape}: {args.steps} steps of {args.rows:,} rows, first {args.warmup} excluded, "
          f"checkpoints every 5 steps")
    print(f"{'':10}{'rows/s (median)':>18}{'runs':>8}")
    print(f"{'local':10}{statistics.median(local):>18,.0f}{len(local):>8}")
    print(f"{'s3':10}{statistics.median(s3):>18,.0f}{len(s3):>8}")
    print(f"per-pair ratios s3/local: {', '.join(f'{r:.3f}' for r in pairs)}")
    print(f"ratio s3/local: {statistics.median(pairs):.3f} (median of pairs; goal >= 0.9); the S3 server used "
          f"{statistics.median(server_cpu):.1f} s of CPU per run on the same cores (median)")


if __name__ == "__main__":
    main()
