"""Workers as local processes: a sidecar and a Spark process per worker.

Both processes of a worker share one process group, so a worker dies as a
unit — ``killpg`` takes the Spark process, its JVM and the sidecar together,
as a pod deletion would. A worker is reported lost when either process exits;
the survivor of the pair is then killed too, so a half-worker never lingers.
Losses are noticed by polling the processes every few milliseconds.

Each worker's process group id is written to ``workers/<w>/pgid``. A
coordinator that was killed leaves its workers running; the next one (a
resume) kills those groups before it starts its own, so two incarnations of
``w0`` never share a buffer directory. (They would be fenced off anyway: a
new run dissolves the ring and resets who may commit.)
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ftpipeline.cluster.base import ClusterBackend
from ftpipeline.embedded.orphans import reap, record
from ftpipeline.lineage.naming import WorkerId
from ftpipeline.worker import exits
from ftpipeline.worker.tls import generate as issue

log = logging.getLogger("ftpipeline.cluster.local")


@dataclass
class _Worker:
    sidecar: subprocess.Popen[bytes]
    executor: subprocess.Popen[bytes]
    reported: bool = False

    @property
    def pgid(self) -> int:
        return self.sidecar.pid


def _signal(returncode: int) -> str:
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


class LocalCluster(ClusterBackend):
    detects = "its processes ending"

    def __init__(
        self,
        run_dir: Path,
        pipeline: str,
        redis_url: str,
        spark_master: str = "local[1]",
        spark_conf: Mapping[str, str] | None = None,
        python: str = sys.executable,
        zookeeper: str | None = None,
        heartbeat_timeout_ms: int = 6000,
        tls: bool = True,
    ) -> None:
        self.run_dir = run_dir
        self.pipeline = pipeline
        self.redis_url = redis_url
        self.spark_master = spark_master
        self.spark_conf = dict(spark_conf or {})
        self.python = python
        self.zookeeper = zookeeper
        self.heartbeat_timeout_ms = heartbeat_timeout_ms
        self.workers: dict[WorkerId, _Worker] = {}
        self.zombies: set[WorkerId] = set()  # paused as zombies: a kill does not reach them
        self.reap_orphans()
        # issued per run, readable by this user alone; the Spark processes are not told where they are.
        # Without (``ftpipeline run --plaintext-workers``): plain gRPC, to measure what TLS costs.
        self.credentials = issue(pipeline) if tls else None
        self.tls_dir = self.credentials.write(run_dir / "tls") if self.credentials else None

    def reap_orphans(self) -> int:
        """Kill the process groups of workers a killed coordinator left behind; returns how many."""
        reaped = sum(reap(f, b"ftpipeline.worker", group=True) for f in (self.run_dir / "workers").glob("*/pgid"))
        if reaped:
            log.warning("killed workers a previous coordinator left running", extra={"workers": reaped})
        return reaped

    def worker_dir(self, worker: WorkerId) -> Path:
        return self.run_dir / "workers" / worker

    def start_worker(self, worker: WorkerId) -> None:
        wdir = self.worker_dir(worker)
        wdir.mkdir(parents=True, exist_ok=True)
        (wdir / "sidecar.addr").unlink(missing_ok=True)
        (wdir / exits.REASON_FILE).unlink(missing_ok=True)
        env = {k: v for k, v in os.environ.items() if k not in ("FTPIPELINE_REDIS_URL", "FTPIPELINE_ZOOKEEPER")}
        env["PYTHONUNBUFFERED"] = "1"
        # the endpoints (and any credentials in them) reach the sidecar alone, through its environment
        stores = {"FTPIPELINE_REDIS_URL": self.redis_url, **({"FTPIPELINE_ZOOKEEPER": self.zookeeper} if self.zookeeper else {})}
        with open(wdir / "sidecar.log", "ab") as slog:
            sidecar = subprocess.Popen(
                [self.python, "-m", "ftpipeline.worker.server", "--worker-id", worker, "--pipeline", self.pipeline,
                 "--dir", str(wdir), *(["--tls-dir", str(self.tls_dir)] if self.tls_dir else []),
                 *(["--heartbeat-timeout-ms", str(self.heartbeat_timeout_ms)] if self.zookeeper else [])],
                stdout=slog, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, process_group=0, env={**env, **stores},
            )
        with open(wdir / "executor.log", "ab") as elog:
            executor = subprocess.Popen(
                [self.python, "-m", "ftpipeline.worker.executor", "--worker-id", worker, "--dir", str(wdir),
                 "--spark-master", self.spark_master, "--spark-conf", json.dumps(self.spark_conf)],
                stdout=elog, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, process_group=sidecar.pid, env=env,
            )
        self.workers[worker] = _Worker(sidecar, executor)
        record(wdir / "pgid", sidecar.pid)

    def _killpg(self, w: _Worker, sig: int) -> None:
        try:
            os.killpg(w.pgid, sig)
        except ProcessLookupError:
            pass

    def kill_worker(self, worker: WorkerId) -> None:
        if worker in self.zombies:  # the kill does not reach it; the partition heals and it wakes up
            self.zombies.discard(worker)
            self._killpg(self.workers[worker], signal.SIGCONT)
            return
        self._killpg(self.workers[worker], signal.SIGKILL)

    def pause_worker(self, worker: WorkerId, zombie: bool = False) -> None:
        self._killpg(self.workers[worker], signal.SIGSTOP)
        if zombie:
            self.zombies.add(worker)

    def lost(self) -> list[WorkerId]:
        gone = []
        for wid, w in self.workers.items():
            if w.reported:
                continue
            if w.sidecar.poll() is not None or w.executor.poll() is not None:
                self._killpg(w, signal.SIGKILL)
                w.sidecar.wait()
                w.executor.wait()
                w.reported = True
                gone.append(wid)
        return gone

    def running(self) -> list[WorkerId]:
        """The workers this backend started that still run (a fresh backend has none: the workers a
        killed ``ftpipeline run`` left behind were reaped, their state may be anything)."""
        return sorted(w for w, p in self.workers.items()
                      if not p.reported and p.sidecar.poll() is None and p.executor.poll() is None)

    def why(self, worker: WorkerId) -> str:
        w = self.workers.get(worker)
        if w is None:
            return "never started"
        codes = [f"{name} exited with code {p.returncode}" if p.returncode >= 0 else f"{name} killed by {_signal(p.returncode)}"
                 for name, p in (("sidecar", w.sidecar), ("executor", w.executor)) if p.returncode is not None]
        where = self.worker_dir(worker)
        return f"{', '.join(codes) or 'killed'}; its logs are in {where}"

    def cannot_run(self, worker: WorkerId) -> str | None:
        w = self.workers.get(worker)
        if w is None or w.executor.returncode != exits.CANNOT_RUN:
            return None
        return exits.reason(self.worker_dir(worker))

    def pids(self, worker: WorkerId) -> tuple[int, int]:
        w = self.workers[worker]
        return w.sidecar.pid, w.executor.pid

    def stop(self, grace_s: float = 10.0) -> None:
        for w in self.workers.values():
            self._killpg(w, signal.SIGTERM)
            self._killpg(w, signal.SIGCONT)  # a stopped worker could not act on SIGTERM
        deadline = time.monotonic() + grace_s
        for w in self.workers.values():
            for p in (w.executor, w.sidecar):
                try:
                    p.wait(max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    self._killpg(w, signal.SIGKILL)
                    p.wait()
