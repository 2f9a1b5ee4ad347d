"""LocalCluster's process groups when a worker's Spark process is started ahead of its sidecar.

The two processes are stand-ins (a Python that sleeps, its command line naming the module it stands
for, which is what the pid-file checks look at): the point is which process leads the worker's group,
what the pid files say, and that a kill, a stop and a takeover reach both processes.
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ftpipeline.cluster.local import LocalCluster
from ftpipeline.embedded.orphans import running
from ftpipeline.lineage.naming import WorkerId

W0 = WorkerId("w0")


@pytest.fixture
def python(tmp_path: Path) -> Path:
    """A 'python' whose ``-m module args...`` sleep (the arguments stay in its command line)."""
    script = tmp_path / "python"
    script.write_text(f"#!/bin/sh\nexec {sys.executable} -c 'import time; time.sleep(300)' \"$@\"\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


@pytest.fixture
def cluster(tmp_path: Path, python: Path) -> Iterator[LocalCluster]:
    made = LocalCluster(tmp_path / "run", "p", "", python=str(python), tls=False)
    yield made
    made.stop(grace_s=2)


def _started(pid: int, module: str) -> None:
    """Wait until ``pid`` runs the stand-in of ``module`` (a pid-file check reads its command line)."""
    deadline = time.monotonic() + 5
    while module.encode() not in Path(f"/proc/{pid}/cmdline").read_bytes() and time.monotonic() < deadline:
        time.sleep(0.02)


def _started_ahead(cluster: LocalCluster) -> tuple[int, int]:
    """w0 started ahead, then joined by its sidecar; its pids, once both run their stand-ins."""
    cluster.prestart([W0])
    cluster.start_worker(W0)
    sidecar, executor = cluster.pids(W0)
    _started(sidecar, "ftpipeline.worker.server")
    _started(executor, "ftpipeline.worker.executor")
    return sidecar, executor


def _gone(pid: int) -> bool:
    deadline = time.monotonic() + 5
    while running(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    return not running(pid)


def test_a_worker_started_ahead_is_one_group_led_by_its_spark_process(cluster: LocalCluster) -> None:
    cluster.prestart([W0])
    wdir = cluster.worker_dir(W0)
    executor = int((wdir / "epid").read_text())
    assert int((wdir / "pgid").read_text()) == executor and os.getpgid(executor) == executor
    cluster.connect("redis://example", None)
    cluster.start_worker(W0)
    sidecar, same = cluster.pids(W0)
    assert same == executor  # the Spark process started ahead is the worker's, not a second one
    assert os.getpgid(sidecar) == executor and int((wdir / "spid").read_text()) == sidecar
    assert cluster.running() == [W0]
    cluster.kill_worker(W0)  # one kill takes both, as a pod deletion would
    assert _gone(sidecar) and _gone(executor)
    assert cluster.lost() == [W0]


def test_a_spark_process_that_ended_before_its_sidecar_came_is_started_again(cluster: LocalCluster) -> None:
    cluster.prestart([W0])
    early = int((cluster.worker_dir(W0) / "epid").read_text())
    os.killpg(early, signal.SIGKILL)
    assert _gone(early)
    time.sleep(0.1)  # the Popen's poll sees it ended
    cluster.start_worker(W0)
    sidecar, executor = cluster.pids(W0)
    assert executor != early and os.getpgid(executor) == sidecar  # a fresh pair, the sidecar leading
    assert int((cluster.worker_dir(W0) / "pgid").read_text()) == sidecar


def test_stop_ahead_leaves_started_workers_alone(cluster: LocalCluster) -> None:
    cluster.prestart([W0, WorkerId("w1")])
    cluster.start_worker(W0)
    early = int((cluster.worker_dir(WorkerId("w1")) / "epid").read_text())
    cluster.stop_ahead()  # a run that failed before it started the rest: w1's Spark process goes, w0 stays
    assert _gone(early)
    assert cluster.running() == [W0]


def test_a_group_whose_spark_process_ended_is_reaped_by_its_sidecar(tmp_path: Path, python: Path,
                                                                     cluster: LocalCluster) -> None:
    sidecar, executor = _started_ahead(cluster)
    os.kill(executor, signal.SIGKILL)  # the group's leader ends; its sidecar runs on (a killed run's orphan)
    assert _gone(executor)
    fresh = LocalCluster(tmp_path / "run", "p", "", python=str(python), tls=False)  # a fresh run in the directory
    assert _gone(sidecar) and fresh.workers == {}
    assert not (cluster.worker_dir(W0) / "pgid").exists()


def test_a_pid_outside_the_worker_s_group_is_not_taken_over(tmp_path: Path, python: Path,
                                                           cluster: LocalCluster) -> None:
    sidecar, executor = _started_ahead(cluster)
    stranger = subprocess.Popen([str(python), "-m", "ftpipeline.worker.server"], start_new_session=True)
    try:
        _started(stranger.pid, "ftpipeline.worker.server")
        (cluster.worker_dir(W0) / "spid").write_text(str(stranger.pid))  # a pid reused by another of our processes
        resumed = LocalCluster(tmp_path / "run", "p", "", python=str(python), tls=False, adopt=True)
        assert resumed.workers == {}  # not kept: the worker is reaped, the stranger left alone
        assert _gone(sidecar) and _gone(executor) and stranger.poll() is None
    finally:
        stranger.kill()
        stranger.wait()


def test_stop_ends_spark_processes_started_ahead_that_never_got_a_sidecar(cluster: LocalCluster) -> None:
    cluster.prestart([W0, WorkerId("w1")])
    pids = [int((cluster.worker_dir(w) / "epid").read_text()) for w in (W0, WorkerId("w1"))]
    cluster.stop(grace_s=2)
    assert all(_gone(pid) for pid in pids)


def test_a_resumed_run_takes_over_a_worker_started_ahead(tmp_path: Path, python: Path,
                                                          cluster: LocalCluster) -> None:
    pids = _started_ahead(cluster)
    resumed = LocalCluster(tmp_path / "run", "p", "", python=str(python), tls=False, adopt=True)
    assert resumed.running() == [W0] and resumed.pids(W0) == pids  # kept, not reaped nor started again
    resumed.kill_worker(W0)  # its group is the Spark process's: the kill reaches both
    assert _gone(pids[0]) and _gone(pids[1])
