"""Workers as local processes: a sidecar and a Spark process per worker.

Both processes of a worker share one process group, so a worker dies as a
unit — ``killpg`` takes the Spark process, its JVM and the sidecar together,
as a pod deletion would. A worker is reported lost when either process exits;
the survivor of the pair is then killed too, so a half-worker never lingers.
Losses are noticed by polling the processes every few milliseconds.

A fresh run may start its workers' Spark processes ahead (``prestart``),
before the run's Redis and ZooKeeper are up: a JVM takes seconds to start
and needs neither. Such a worker's group is its Spark process's, and
``start_worker`` later adds the sidecar to it; otherwise the sidecar leads.

Each worker's process group id is written to ``workers/<w>/pgid`` (its
sidecar's pid to ``spid``, its Spark process's to ``epid``). A coordinator
that was killed leaves its workers running. The next one, a resume
(``adopt``), keeps those still running — with the credentials in ``tls/`` they were started with — so the
coordinator takes them over as an operator takes over the pods of the one
before it (``coordinator/admission.py``): no JVM starts again, and a
coordinator loss costs about what a worker loss does. It can only watch
them, not wait for them (they are not its children): one that ends is
found by its pid no longer running. A fresh run kills those groups (found
by any of their processes still running) before it starts its own, so two
incarnations of ``w0`` never share a buffer directory. (They would be fenced
off anyway: a new run dissolves the ring and resets who may commit.)
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
from ftpipeline.embedded.orphans import alive, kill_and_wait, record, running
from ftpipeline.lineage.naming import WorkerId
from ftpipeline.worker import exits
from ftpipeline.worker.tls import Credentials, generate as issue, load as load_credentials

log = logging.getLogger("ftpipeline.cluster.local")

# A Spark process started ahead waits this long for its sidecar (the run's Redis, ZooKeeper and coordinator
# start meanwhile); one a run never joins to a sidecar (a coordinator killed in between) then ends by itself.
AHEAD_WAIT_S = 300


@dataclass
class _Worker:
    """A worker's two processes: started here (``Popen``), or adopted from an earlier run (pids only)."""

    pids: tuple[int, int]  # sidecar, Spark process
    pgid: int              # their process group's id: the sidecar's pid, or the Spark process's if it started first
    sidecar: subprocess.Popen[bytes] | None = None
    executor: subprocess.Popen[bytes] | None = None
    reported: bool = False

    def ended(self) -> bool:
        """Has either process ended?"""
        if self.sidecar is None or self.executor is None:
            return not (running(self.pids[0]) and running(self.pids[1]))
        return self.sidecar.poll() is not None or self.executor.poll() is not None

    def wait(self, timeout_s: float | None = None) -> bool:
        """Wait until both ended (False: not within ``timeout_s``)."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        for proc, pid in ((self.executor, self.pids[1]), (self.sidecar, self.pids[0])):
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if proc is not None:
                try:
                    proc.wait(left)
                except subprocess.TimeoutExpired:
                    return False
                continue
            while running(pid):
                if deadline is not None and time.monotonic() > deadline:
                    return False
                time.sleep(0.02)
        return True


def _group(pgid_file: Path) -> int | None:
    try:
        return int(pgid_file.read_text())
    except (OSError, ValueError):
        return None


def _in_group(pid: int, group: int | None) -> bool:
    """Is ``pid`` a member of process group ``group`` (not a reused pid elsewhere)?"""
    try:
        return group is not None and os.getpgid(pid) == group
    except ProcessLookupError:
        return False


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
        adopt: bool = False,
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
        self._ahead: dict[WorkerId, subprocess.Popen[bytes]] = {}  # Spark processes started ahead (``prestart``)
        self.zombies: set[WorkerId] = set()  # paused as zombies: a kill does not reach them
        # issued per run, readable by this user alone; the Spark processes are not told where they are.
        # Without (``ftpipeline run --plaintext-workers``): plain gRPC, to measure what TLS costs. Workers
        # kept from a killed run keep theirs.
        self.credentials = self._adopt_orphans(tls) if adopt else None
        self.reap_orphans(keep=set(self.workers))
        if not self.workers:
            self.credentials = issue(pipeline) if tls else None
        self.tls_dir = self.credentials.write(run_dir / "tls") if self.credentials else None

    def _adopt_orphans(self, tls: bool) -> Credentials | None:
        """Keep the workers a killed coordinator left running, with the credentials they were given; none
        kept if those cannot be read (they are then reaped)."""
        for pgid_file in sorted((self.run_dir / "workers").glob("*/pgid")):
            wdir = pgid_file.parent
            group = _group(pgid_file)
            # an older run's directory has no spid: its sidecar led the group
            sidecar = alive(wdir / "spid" if (wdir / "spid").exists() else pgid_file, b"ftpipeline.worker.server")
            executor = alive(wdir / "epid", b"ftpipeline.worker.executor")
            if (group is not None and sidecar is not None and executor is not None
                    and _in_group(sidecar, group) and _in_group(executor, group)):
                self.workers[WorkerId(wdir.name)] = _Worker((sidecar, executor), group)
        if not self.workers or not tls:
            return None
        try:
            return load_credentials(self.run_dir / "tls")
        except OSError as exc:
            log.warning("workers left running not kept: their credentials cannot be read",
                        extra={"workers": sorted(self.workers), "error": str(exc)})
            self.workers = {}
            return None

    def reap_orphans(self, keep: set[WorkerId] | None = None) -> int:
        """Kill the process groups of workers a killed coordinator left behind (but those in ``keep``);
        returns how many. A group is found by any of its processes still running ours: its leader (the
        Spark process, if it started first) may have ended while its sidecar runs on."""
        reaped = 0
        for pgid_file in (self.run_dir / "workers").glob("*/pgid"):
            if pgid_file.parent.name in (keep or set()):
                continue
            group = _group(pgid_file)
            members = [pid for name, marker in (("pgid", b"ftpipeline.worker"), ("spid", b"ftpipeline.worker.server"),
                                                ("epid", b"ftpipeline.worker.executor"))
                       if (pid := alive(pgid_file.parent / name, marker)) is not None and _in_group(pid, group)]
            pgid_file.unlink(missing_ok=True)
            if group is not None and members and kill_and_wait(group, members, group=True):
                reaped += 1
        if reaped:
            log.warning("killed workers a previous coordinator left running", extra={"workers": reaped})
        return reaped

    def worker_dir(self, worker: WorkerId) -> Path:
        return self.run_dir / "workers" / worker

    def connect(self, redis_url: str, zookeeper: str | None) -> None:
        """The run's stores, once they are up: the sidecars started from now on are given them."""
        self.redis_url = redis_url
        self.zookeeper = zookeeper

    def prestart(self, workers: list[WorkerId]) -> None:
        """Start these workers' Spark processes now, each the leader of its worker's process group;
        ``start_worker`` adds the sidecar to the group later (the Spark process waits for its address)."""
        for worker in workers:
            if worker not in self.workers and worker not in self._ahead:
                self._ahead[worker] = self._executor(worker, self._fresh_dir(worker), 0)
                record(self.worker_dir(worker) / "pgid", self._ahead[worker].pid)

    def _fresh_dir(self, worker: WorkerId) -> Path:
        wdir = self.worker_dir(worker)
        wdir.mkdir(parents=True, exist_ok=True)
        (wdir / "sidecar.addr").unlink(missing_ok=True)  # the Spark process waits for its sidecar's, not an older one
        (wdir / exits.REASON_FILE).unlink(missing_ok=True)
        for name in ("pgid", "spid", "epid"):  # an earlier run's, reaped: written again as the processes start
            (wdir / name).unlink(missing_ok=True)
        return wdir

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in ("FTPIPELINE_REDIS_URL", "FTPIPELINE_ZOOKEEPER")}
        env["PYTHONUNBUFFERED"] = "1"
        return env

    def _executor(self, worker: WorkerId, wdir: Path, group: int) -> subprocess.Popen[bytes]:
        with open(wdir / "executor.log", "ab") as elog:
            executor = subprocess.Popen(
                [self.python, "-m", "ftpipeline.worker.executor", "--worker-id", worker, "--dir", str(wdir),
                 "--spark-master", self.spark_master, "--spark-conf", json.dumps(self.spark_conf),
                 *(["--sidecar-wait-s", str(AHEAD_WAIT_S)] if group == 0 else [])],
                stdout=elog, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, process_group=group, env=self._env(),
            )
        record(wdir / "epid", executor.pid)
        return executor

    def start_worker(self, worker: WorkerId) -> None:
        ahead = self._ahead.pop(worker, None)
        if ahead is not None and ahead.poll() is not None:  # its Spark process ended already: start both again
            ahead = None
        wdir = self.worker_dir(worker) if ahead is not None else self._fresh_dir(worker)
        # the endpoints (and any credentials in them) reach the sidecar alone, through its environment
        stores = {"FTPIPELINE_REDIS_URL": self.redis_url, **({"FTPIPELINE_ZOOKEEPER": self.zookeeper} if self.zookeeper else {})}
        with open(wdir / "sidecar.log", "ab") as slog:
            sidecar = subprocess.Popen(
                [self.python, "-m", "ftpipeline.worker.server", "--worker-id", worker, "--pipeline", self.pipeline,
                 "--dir", str(wdir), *(["--tls-dir", str(self.tls_dir)] if self.tls_dir else []),
                 *(["--heartbeat-timeout-ms", str(self.heartbeat_timeout_ms)] if self.zookeeper else [])],
                stdout=slog, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                process_group=0 if ahead is None else ahead.pid, env={**self._env(), **stores},
            )
        record(wdir / "spid", sidecar.pid)
        executor = ahead if ahead is not None else self._executor(worker, wdir, sidecar.pid)
        group = sidecar.pid if ahead is None else ahead.pid
        self.workers[worker] = _Worker((sidecar.pid, executor.pid), group, sidecar, executor)
        record(wdir / "pgid", group)

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

    def evict_worker(self, worker: WorkerId) -> None:
        for pid in self.workers[worker].pids:  # each process, as a kubelet signals each container's
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    def pause_worker(self, worker: WorkerId, zombie: bool = False) -> None:
        self._killpg(self.workers[worker], signal.SIGSTOP)
        if zombie:
            self.zombies.add(worker)

    def lost(self) -> list[WorkerId]:
        gone = []
        for wid, w in self.workers.items():
            if w.reported:
                continue
            if w.ended():
                self._killpg(w, signal.SIGKILL)
                w.wait()
                w.reported = True
                gone.append(wid)
        return gone

    def running(self) -> list[WorkerId]:
        """The workers this backend started or adopted (a resume keeps those a killed ``ftpipeline run``
        left running) that still run."""
        return sorted(w for w, p in self.workers.items() if not p.reported and not p.ended())

    def why(self, worker: WorkerId) -> str:
        w = self.workers.get(worker)
        if w is None:
            return "never started"
        if w.sidecar is None or w.executor is None:
            return f"ended (kept from an earlier run, so its exit code is not known here); its logs are in {self.worker_dir(worker)}"
        codes = [f"{name} exited with code {p.returncode}" if p.returncode >= 0 else f"{name} killed by {_signal(p.returncode)}"
                 for name, p in (("sidecar", w.sidecar), ("executor", w.executor)) if p.returncode is not None]
        where = self.worker_dir(worker)
        return f"{', '.join(codes) or 'killed'}; its logs are in {where}"

    def cannot_run(self, worker: WorkerId) -> str | None:
        w = self.workers.get(worker)
        if w is None or (w.executor is not None and w.executor.returncode != exits.CANNOT_RUN):
            return None
        if w.executor is None and not (self.worker_dir(worker) / exits.REASON_FILE).exists():
            return None
        return exits.reason(self.worker_dir(worker))

    def pids(self, worker: WorkerId) -> tuple[int, int]:
        return self.workers[worker].pids

    def stop_ahead(self) -> None:
        """End the Spark processes started ahead that no sidecar joined (a run that failed before its
        workers started); workers started or taken over are left alone."""
        for ahead in self._ahead.values():
            try:
                os.killpg(ahead.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            ahead.wait()
        self._ahead.clear()

    def stop(self, grace_s: float = 10.0) -> None:
        self.stop_ahead()
        for w in self.workers.values():
            self._killpg(w, signal.SIGTERM)
            self._killpg(w, signal.SIGCONT)  # a stopped worker could not act on SIGTERM
        deadline = time.monotonic() + grace_s
        for w in self.workers.values():
            if not w.wait(max(0.0, deadline - time.monotonic())):
                self._killpg(w, signal.SIGKILL)
                w.wait()
