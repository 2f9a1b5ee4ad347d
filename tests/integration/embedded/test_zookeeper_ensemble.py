"""A three-member ZooKeeper ensemble loses one member while a pipeline runs: the run does not stop.

Real servers (``serve-zookeeper``'s ensemble mode, three JVMs on the loopback interface), a real run through
the CLI with every member in its connect string, one member killed (SIGKILL, as a crash) once step 4's
checkpoint starts: a follower, or the leader (the other two elect a new one first). The run finishes with no worker
declared lost and its output equals the oracle. Losing a follower costs no pause, or a reconnect if the
coordinator's session was on it; the workers' sessions move to the members left within their timeouts; losing
the leader pauses the run for the election (under a second here: ticks of 500 ms). A member that goes silent
rather than dying (the packets sent to it dropped, as when its machine is lost) loses a client's session to
another member as soon as the client's socket gives up on it, long before kazoo's own ping timeout.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ftpipeline.commandlog.zkclient import connect
from ftpipeline.embedded.ports import free_port
from ftpipeline.embedded.zookeeper import EmbeddedZooKeeper, Ensemble, mode, srvr
from ftpipeline.oracle import compare
from ftpipeline.spec import load_pipeline

from ..pipelines import clickstream

STEPS = 14


def role(member: EmbeddedZooKeeper) -> str:
    """``leader``, ``follower``, or "" (not serving)."""
    return mode(srvr(member.port))


@pytest.fixture
def ensemble(tmp_path: Path) -> Iterator[list[EmbeddedZooKeeper]]:
    hosts = tuple(f"127.0.0.1:{free_port()}:{free_port()}" for _ in range(3))
    members = [EmbeddedZooKeeper(tmp_path / f"zk{i}", ensemble=Ensemble(hosts, i + 1), port=free_port())
               for i in range(3)]
    errors: list[BaseException] = []

    def start(member: EmbeddedZooKeeper) -> None:
        try:
            member.start(timeout_s=90)
        except BaseException as exc:  # noqa: BLE001 - said below
            errors.append(exc)

    threads = [threading.Thread(target=start, args=(m,)) for m in members]  # each waits for a majority
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert not errors, errors
        assert sorted(role(m) for m in members) == ["follower", "follower", "leader"]
        yield members
    finally:
        for m in members:
            m.stop()


@pytest.mark.parametrize("lost", ["follower", "leader"])
def test_a_member_lost_mid_run_neither_stops_the_run_nor_loses_a_worker(
        tmp_path: Path, ensemble: list[EmbeddedZooKeeper], redis_url: str, spark: object, lost: str) -> None:
    connect = ",".join(m.connect for m in ensemble)
    pipeline = clickstream(tmp_path, f"zk-{lost}", steps=STEPS, workers=2, rows_per_step=3000,
                           parallelism={"events": 2, "clean": 2, "per-user": 2, "output": 2}, checkpoint_every=4)
    summary = tmp_path / "summary.json"
    proc = subprocess.Popen([sys.executable, "-m", "ftpipeline.cli", "run", str(pipeline), "--no-progress",
                             "--run-dir", str(tmp_path / "run"), "--redis-url", redis_url, "--zookeeper", connect,
                             "--summary-json", str(summary)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, cwd=tmp_path)
    try:
        log = tmp_path / "run" / "coordinator.log"
        deadline = time.monotonic() + 300
        while proc.poll() is None and time.monotonic() < deadline and not (
                log.exists() and '"boundary": 4' in log.read_text()):  # the first checkpoint: step 4 is done
            time.sleep(0.1)
        assert proc.poll() is None, proc.communicate()[0][-3000:]
        [victim] = [m for m in ensemble if role(m) == lost][:1]
        victim.kill()
        killed_at = time.monotonic()
        output = proc.communicate(timeout=600)[0]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    took = time.monotonic() - killed_at
    assert proc.returncode == 0, output[-4000:]
    result = json.loads(summary.read_text())
    print(f"{lost} killed after step 4's checkpoint began; the run ended {took:.1f} s later; "
          f"pauses {result['outages']}; modes now {[role(m) for m in ensemble]}")
    assert result["committed"] == STEPS
    assert result["recoveries"] == [], result["recoveries"]  # no worker's session expired
    assert sorted(role(m) for m in ensemble) == ["", "follower", "leader"]
    # a follower holding no session costs nothing; one holding the coordinator's (a third of the runs) a
    # reconnect: its process died, so its connections were reset at once. The leader: an election.
    assert all(o["component"] == "zookeeper" and o["outcome"] == "resumed" and o["seconds"] < 5
               for o in result["outages"]), result["outages"]
    [comparison] = compare(spark, load_pipeline(pipeline), STEPS)
    assert comparison.duplicates == 0 and comparison.equal, comparison


@pytest.mark.skipif(shutil.which("iptables") is None or os.geteuid() != 0, reason="needs iptables, as root")
def test_a_silent_member_loses_its_client_to_another_member_with_its_session_kept(
        ensemble: list[EmbeddedZooKeeper]) -> None:
    """A member that goes silent (its machine lost: the packets sent to it dropped, so nothing answers and
    nothing is reset) while a client's session is on it: the client's next request moves the session to
    another member once its socket gives up (``zkclient.SILENT_SERVER_MS``), not when kazoo's ping would
    (two thirds of the session timeout: 20 s of this 30 s session)."""
    client = connect(",".join(m.connect for m in ensemble), timeout_s=30.0)
    rule: list[str] = []
    try:
        session = client.client_id
        client.create("/silent", b"0")
        port = client._connection._socket.getpeername()[1]  # the member this session is on
        rule = ["INPUT", "-p", "tcp", "-d", "127.0.0.1", "--dport", str(port), "-j", "DROP"]
        subprocess.run(["iptables", "-I", *rule], check=True)
        start = time.monotonic()
        client.retry(client.set, "/silent", b"1")  # refused while the connection drops, then served elsewhere
        took = time.monotonic() - start
        print(f"a write {took:.2f} s after the member {port} went silent (kazoo's ping alone: 20 s)")
        assert client.client_id == session, "the same session, on another member"
        assert client._connection._socket.getpeername()[1] != port
        assert client.get("/silent")[0] == b"1"
        assert took < 10.0, f"{took:.1f} s: the socket did not give up before kazoo's ping timeout"
    finally:
        if rule:
            subprocess.run(["iptables", "-D", *rule], check=False)
        client.stop()
        client.close()
