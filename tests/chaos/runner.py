"""Seeded fault schedules against real runs: every component a pipeline depends on is broken for real.

A *schedule* is a topology and a few faults at chosen steps, all drawn from
one seed, so a failing schedule is rerun exactly by its number. Running one:

1. start this schedule's own ZooKeeper (behind a :class:`~tests.chaos.proxy.TcpProxy`,
   so it can be cut off) and Redis (with an append-only file: a restart keeps
   its data, a "loss" deletes the file first);
2. start ``ftpipeline run`` on the topology, as a user would, and follow its
   committed step in Redis;
3. at each fault's step, do it: SIGKILL or SIGSTOP a worker's process group,
   kill two workers at once, or every one, evict one (SIGTERM: it hands its channels over),
   kill the coordinator and ``--resume`` it,
   restart Redis with its append-only file (SIGTERM; a SIGKILL in every fourth
   schedule), empty it, or freeze it (SIGSTOP for 8-20 s), restart ZooKeeper or cut it off for 10-30 s, make the
   checkpoint storage unwritable for a few seconds; the zombie and the kill
   during a checkpoint are the CLI's own injections (``--fault zombie``,
   ``--kill-during-checkpoint``), which know the instant;
4. when the run has finished by itself, compare every sink *and* the dead
   letters with the oracle (``ftpipeline.oracle.verify``): rows lost are the
   oracle's rows missing from the output, rows duplicated the extra ones.

Nothing here is a mock: the servers, the workers and Spark are real, and the
oracle shares no machinery with the runtime. ``tests/chaos/test_chaos.py``
runs a fixed sample; ``bench/chaos.py`` runs any number and prints the table.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
import yaml

from ftpipeline.embedded.redis import EmbeddedRedis
from ftpipeline.embedded.zookeeper import EmbeddedZooKeeper

from ..integration.pipelines import clickstream, identity_of
from .proxy import TcpProxy

STEPS = 12
TOPOLOGIES = ("clickstream", "files", "pipelined")
# what each fault does; every topology has three workers, so most worker faults leave a survivor
# ("all-workers", a node that held them all, leaves none: a new set starts from the newest checkpoint)
FAULTS = ("worker-kill", "worker-stop", "zombie", "two-workers", "kill-in-checkpoint", "coordinator-kill",
          "redis-restart", "redis-lost", "zookeeper-restart", "zookeeper-cut", "storage-unwritable", "all-workers",
          "worker-evict", "redis-freeze")
CLI_FAULTS = ("zombie", "kill-in-checkpoint")  # injected by ftpipeline run itself: one per run


@dataclass(frozen=True)
class Schedule:
    number: int
    topology: str
    faults: tuple[tuple[str, int], ...]  # (fault, step it is done at), in step order
    cut_s: float = 15.0                  # how long a zookeeper-cut lasts

    @classmethod
    def draw(cls, number: int, seed: int = 0) -> Schedule:
        rng = random.Random(seed * 1_000_003 + number)
        topology = TOPOLOGIES[number % len(TOPOLOGIES)]
        kinds = [FAULTS[number % len(FAULTS)]]  # every kind comes round in turn; a second one at random
        second = rng.choice([f for f in FAULTS if f != kinds[0] and not (f in CLI_FAULTS and kinds[0] in CLI_FAULTS)])
        kinds.append(second)
        steps = sorted(rng.sample(range(3, STEPS - 2), 2))
        return cls(number, topology, tuple(zip(kinds, steps)), cut_s=round(rng.uniform(10, 30), 1))

    def label(self) -> str:
        return ", ".join(f"{f}@{s}" for f, s in self.faults)


@dataclass
class Outcome:
    schedule: Schedule
    exit_code: int = -1
    committed: int = 0
    seconds: float = 0.0
    error: str = ""
    recoveries_ms: list[int] = field(default_factory=list)
    outages: list[str] = field(default_factory=list)
    rows_lost: int = 0
    rows_duplicated: int = 0
    letters_equal: bool = False
    comparisons: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return (self.exit_code == 0 and self.committed == STEPS and not self.error and self.rows_lost == 0
                and self.rows_duplicated == 0 and self.letters_equal)

    def row(self) -> dict[str, Any]:
        return {"schedule": self.schedule.number, "topology": self.schedule.topology, "faults": self.schedule.label(),
                "outcome": "ok" if self.ok else (self.error or f"exit {self.exit_code}")[:80],
                "recoveries_ms": self.recoveries_ms, "outages": self.outages, "rows_lost": self.rows_lost,
                "rows_duplicated": self.rows_duplicated, "seconds": round(self.seconds, 1)}


# --- topologies ------------------------------------------------------------------

FILES_MODULE = '''
from pyspark.sql import functions as F

def enrich(df):
    return df.withColumn("amount_eur", F.col("amount_cents") / 100.0)

def tag(df):
    return df.withColumn("amount_eur", F.col("amount_cents") * 0.01).withColumn("big", F.col("amount_cents") > 250)
'''


def files_pipeline(directory: Path, name: str) -> Path:
    """A file source with malformed records feeding two sinks through a multi-input stage:
    orders -> enrich -> raw (sink); orders -> tag; [enrich, tag] -> per-user (aggregate) -> totals (sink)."""
    data = directory / "in"
    data.mkdir(parents=True, exist_ok=True)
    rng = random.Random(7)
    for f in range(6):
        lines = []
        for i in range(300):
            roll = rng.random()
            if roll < 0.03:
                lines.append('{"user_id": "u1", "amount_cents": "lots"}')
            elif roll < 0.05:
                lines.append("{not json")
            else:
                lines.append(json.dumps({"user_id": f"u{rng.randrange(40)}", "amount_cents": rng.randrange(1, 500)}))
        (data / f"orders-{f:02d}.jsonl").write_text("\n".join(lines) + "\n")
    (directory / "orders.py").write_text(FILES_MODULE)
    (directory / f"{name}.yaml").write_text(textwrap.dedent(f"""\
        apiVersion: ftpipeline.io/v1alpha1
        kind: FTPipeline
        metadata: {{name: {name}}}
        spec:
          image: x
          entryPoint: orders.py
          workers: 3
          deadLetter: {{path: dead}}
          steps: {{maxSteps: {STEPS}}}
          checkpoint: {{intervalSteps: 4, storage: {{path: checkpoints}}}}
          recovery: {{heartbeatTimeoutMs: 3000}}
          stages:
            - name: orders
              parallelism: 2
              source: {{file: {{path: in, format: jsonl, rowsPerStep: 140, schema: {{user_id: string, amount_cents: long}}}}}}
            - {{name: enrich, parallelism: 2, inputs: [{{stage: orders}}], transform: {{function: enrich}}}}
            - {{name: tag, parallelism: 2, inputs: [{{stage: orders}}], transform: {{function: tag}}}}
            - name: per-user
              parallelism: 2
              inputs: [{{stage: enrich, partition: hash, keys: [user_id]}}, {{stage: tag, partition: hash, keys: [user_id]}}]
              aggregate:
                keyBy: [user_id]
                aggregations: [{{name: orders, op: count}}, {{name: eur, op: sum, column: amount_eur}}]
            - {{name: raw, parallelism: 2, inputs: [{{stage: enrich}}], sink: {{parquet: {{path: out-raw}}}}}}
            - {{name: totals, parallelism: 2, inputs: [{{stage: per-user}}], sink: {{parquet: {{path: out-totals}}}}}}
        """))
    return directory / f"{name}.yaml"


def build(topology: str, directory: Path, name: str) -> Path:
    if topology == "files":
        return files_pipeline(directory, name)
    pipeline = clickstream(directory, name, steps=STEPS, workers=3, rows_per_step=3000, checkpoint_every=4,
                           parallelism={"events": 2, "clean": 2, "per-user": 2, "output": 2}, heartbeat_ms=3000,
                           mode="pipelined" if topology == "pipelined" else "lockstep", window=3)
    doc = yaml.safe_load(pipeline.read_text())
    doc["spec"]["deadLetter"] = {"path": str(directory / "dead")}
    pipeline.write_text(yaml.safe_dump(doc))
    return pipeline


# --- running one schedule ----------------------------------------------------------

class Run:
    """One schedule's servers, its ``ftpipeline run`` process, and the faults done to them."""

    def __init__(self, schedule: Schedule, directory: Path) -> None:
        self.schedule = schedule
        self.dir = directory
        self.zk = EmbeddedZooKeeper(directory / "zookeeper").start()
        self.proxy = TcpProxy(self.zk.port).start()
        self.redis = EmbeddedRedis(directory / "redis", appendonly=True).start()
        self.pipeline = build(schedule.topology, directory, f"chaos{schedule.number}")
        self.run_dir = directory / "run"
        self.proc: subprocess.Popen[str] | None = None
        self.output = ""
        self.key = identity_of(self.pipeline)
        self._r = redis.Redis.from_url(self.redis.url, socket_timeout=1, socket_connect_timeout=1)
        self._committed = 0

    def start(self, *extra: str) -> None:
        cmd = [sys.executable, "-m", "ftpipeline.cli", "run", str(self.pipeline), "--no-progress",
               "--run-dir", str(self.run_dir), "--redis-url", self.redis.url, "--zookeeper", self.proxy.address,
               "--summary-json", str(self.dir / "summary.json"), *extra]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=self.dir)

    def committed(self) -> int:
        try:
            self._committed = int(self._r.get(f"ftp:{{{self.key}}}:committed") or self._committed)
        except redis.RedisError:
            pass  # Redis is down (a fault of this schedule): the last value stands
        return self._committed

    def wait_for_step(self, step: int, timeout_s: float = 300) -> bool:
        deadline = time.monotonic() + timeout_s
        while self.committed() < step:
            if self.proc is None or self.proc.poll() is not None or time.monotonic() > deadline:
                return False
            time.sleep(0.1)
        return True

    def workers(self) -> list[tuple[str, int]]:
        """Live workers: (id, process group), a member's group leader still running."""
        out = []
        for pgid_file in sorted((self.run_dir / "workers").glob("*/pgid")):
            try:
                pgid = int(pgid_file.read_text().split()[0])
                state = Path(f"/proc/{pgid}/stat").read_text().split(")")[1].split()[0]
            except (OSError, ValueError, IndexError):
                continue
            if state not in ("Z", "T", "X"):
                out.append((pgid_file.parent.name, pgid))
        return out

    def do(self, fault: str, rng: random.Random) -> None:
        if fault in ("worker-kill", "worker-stop", "two-workers"):
            live = self.workers()
            victims = rng.sample(live, 2 if fault == "two-workers" and len(live) > 2 else 1) if live else []
            for _, pgid in victims:
                try:
                    os.killpg(pgid, signal.SIGSTOP if fault == "worker-stop" else signal.SIGKILL)
                except ProcessLookupError:
                    pass
        elif fault == "worker-evict":  # a drain: SIGTERM to each process, as a kubelet to each container
            live = self.workers()
            if live:
                wid = rng.choice(live)[0]
                for name in ("spid", "epid"):
                    try:
                        os.kill(int((self.run_dir / "workers" / wid / name).read_text().split()[0]), signal.SIGTERM)
                    except (OSError, ValueError, IndexError):
                        pass
        elif fault == "all-workers":
            for _, pgid in self.workers():
                try:
                    os.killpg(pgid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        elif fault == "coordinator-kill":
            assert self.proc is not None
            self.proc.send_signal(signal.SIGKILL)
            self.output += self.proc.communicate()[0]
            self.start("--resume")
        elif fault == "redis-restart":  # its data kept: a SIGTERM (the file is flushed), or a crash
            if self.schedule.number % 4 == 0:  # SIGKILL: what Redis acknowledged is in the file already
                self.redis.kill()
            else:
                self.redis.stop()
            time.sleep(rng.uniform(1, 4))
            self.redis.start()
        elif fault == "redis-lost":
            self.redis.kill()
            for f in self.redis.directory.iterdir():
                if f.name.startswith("appendonly") or f.suffix in (".aof", ".rdb"):
                    shutil.rmtree(f) if f.is_dir() else f.unlink()
            time.sleep(rng.uniform(1, 3))
            self.redis.start()
        elif fault == "redis-freeze":  # a hung Redis (SIGSTOP): connections stay open and nothing answers, longer
            self.redis.send(signal.SIGSTOP)  # than the clients' socket timeouts; then it wakes with all it had
            time.sleep(rng.uniform(8, 20))
            self.redis.send(signal.SIGCONT)
        elif fault == "zookeeper-restart":
            self.zk.kill()
            time.sleep(rng.uniform(2, 6))
            self.zk.start()
        elif fault == "zookeeper-cut":
            self.proxy.cut()
            time.sleep(self.schedule.cut_s)
            self.proxy.restore()
        elif fault == "storage-unwritable":
            # a file where the directory was: every write below it fails (ENOTDIR), even as root,
            # which permissions would not stop
            storage, away = self.dir / "checkpoints", self.dir / "checkpoints.away"
            storage.mkdir(exist_ok=True)
            storage.rename(away)
            storage.write_text("storage unavailable")
            time.sleep(rng.uniform(2, 5))
            storage.unlink()
            away.rename(storage)

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.output += self.proc.communicate()[0]
        self.proxy.stop()
        self.zk.stop()
        self.redis.stop()
        self._r.close()


def run_schedule(schedule: Schedule, directory: Path, spark: Any, timeout_s: float = 900) -> Outcome:
    from ftpipeline.oracle import verify
    from ftpipeline.spec import load_pipeline

    outcome = Outcome(schedule)
    started = time.monotonic()
    rng = random.Random(schedule.number)
    run = Run(schedule, directory)
    try:
        cli = dict(schedule.faults)
        extra: list[str] = []
        if "zombie" in cli:
            # every task a Spark job: the pause lands while the victim runs one (coordinator/detection.py)
            extra = ["--fault", "zombie", "--kill-at-step", str(cli["zombie"]), "--no-plan-reuse"]
        elif "kill-in-checkpoint" in cli:
            extra = ["--kill-during-checkpoint", "--kill-at-step", str(cli["kill-in-checkpoint"])]
        run.start(*extra)
        for fault, step in schedule.faults:
            if fault in CLI_FAULTS:
                continue
            if not run.wait_for_step(step):
                break
            run.do(fault, rng)
        assert run.proc is not None
        try:
            run.output += run.proc.communicate(timeout=max(60.0, timeout_s - (time.monotonic() - started)))[0]
        except subprocess.TimeoutExpired:
            outcome.error = f"no end within {timeout_s:.0f} s"
        outcome.exit_code = run.proc.returncode if run.proc.returncode is not None else -1
        summary_file = directory / "summary.json"
        summary = json.loads(summary_file.read_text()) if summary_file.exists() else {}
        outcome.committed = int(summary.get("committed", 0))
        outcome.recoveries_ms = [round(r.get("seconds", 0) * 1000) for r in summary.get("recoveries", [])]
        outcome.outages = [f"{o['component']} {o['seconds']:.1f}s {o['outcome']}" for o in summary.get("outages", [])]
        if outcome.exit_code != 0 and not outcome.error:
            lines = [line for line in run.output.splitlines() if line.strip()]
            outcome.error = next((line.strip() for line in reversed(lines) if "failed" in line.lower()),
                                 lines[-1].strip() if lines else f"exit {outcome.exit_code}")
        spec = load_pipeline(run.pipeline)
        steps = outcome.committed or STEPS
        for c in verify(spark, spec, steps, directory / "dead"):
            outcome.comparisons.append(str(c))
            if c.what == "dead letters":
                outcome.letters_equal = c.equal
            else:
                outcome.rows_lost += c.missing
                outcome.rows_duplicated += c.extra
    except Exception as exc:  # the runner's own trouble is an outcome too, never a lost schedule
        outcome.error = outcome.error or f"{type(exc).__name__}: {exc}"
    finally:
        run.close()
        outcome.seconds = time.monotonic() - started
        (directory / "output.log").write_text(run.output)
    return outcome
