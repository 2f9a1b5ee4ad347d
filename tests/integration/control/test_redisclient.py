"""A connection into nothing: the packets of a client's open connection to Redis are dropped (as when the
pod it reached is deleted and its network goes with no reset), while new connections get through. The
command on it times out and is sent again on a new connection, instead of waiting for TCP to give up."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ftpipeline.control.redisclient import COMMAND_TIMEOUT_S, connect
from ftpipeline.lineage.naming import ObjectName, Task, TaskKind, WorkerId
from ftpipeline.lineage.tables import Completion, LineageTables

pytestmark = pytest.mark.skipif(shutil.which("iptables") is None or shutil.which("redis-server") is None,
                                reason="needs iptables (root) and redis-server")


@pytest.fixture
def tcp_redis(tmp_path: Path) -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--dir", str(tmp_path)], stdout=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)
        yield port
    finally:
        proc.kill()
        proc.wait()


def _iptables(action: str, rule: list[str]) -> None:
    subprocess.run(["iptables", action, "OUTPUT", *rule], check=True, capture_output=True)


def test_a_command_on_a_connection_whose_peer_vanished_is_sent_again_on_a_new_one(tcp_redis: int) -> None:
    r = connect(f"redis://127.0.0.1:{tcp_redis}/0")
    r.set("k", "before")
    connection = r.connection_pool.get_connection()
    local_port = connection._sock.getsockname()[1]  # type: ignore[union-attr]
    r.connection_pool.release(connection)
    # every packet of that one connection, either way, is dropped: it leads nowhere, and nothing resets it
    rules = [["-p", "tcp", "-o", "lo", "--sport", str(local_port), "--dport", str(tcp_redis), "-j", "DROP"],
             ["-p", "tcp", "-o", "lo", "--sport", str(tcp_redis), "--dport", str(local_port), "-j", "DROP"]]
    for rule in rules:
        _iptables("-I", rule)
    try:
        t0 = time.monotonic()
        r.set("k", "after")
        took = time.monotonic() - t0
    finally:
        for rule in rules:
            _iptables("-D", rule)
    print(f"the command took {took:.1f} s")
    assert r.get("k") == b"after"
    assert COMMAND_TIMEOUT_S <= took < 4 * COMMAND_TIMEOUT_S, took  # TCP alone would wait ~15 min


def test_a_completion_whose_reply_was_lost_is_recorded_once_and_reported_recorded(tcp_redis: int) -> None:
    """A task's completion reaches Redis and is recorded, but the reply never comes back (a cut that healed,
    a Redis that froze and woke after the client gave up): the client asks again on a new connection. The
    second request must say recorded, not superseded: a sidecar told "superseded" drops the task's outputs from
    its index, and the tasks that read them would wait for them for ever."""
    r = connect(f"redis://127.0.0.1:{tcp_redis}/0", socket_timeout=0.5)
    tables, worker = LineageTables(r, "p"), WorkerId("w0")
    tables.admit(worker)
    warm, task = Task(TaskKind.TRANSFORM, "b", 0, 1), Task(TaskKind.TRANSFORM, "b", 0, 2)
    out = ObjectName("b", 0, 2, "c", 0, 0).key()
    tables.assign([(worker, warm), (worker, task)])
    event = {"t": "done"}
    assert tables.complete(worker, Completion(warm, [], [], None, event, {"tasks": 1})) == 1  # the script is loaded
    connection = r.connection_pool.get_connection()
    local_port = connection._sock.getsockname()[1]  # type: ignore[union-attr]
    r.connection_pool.release(connection)
    # the replies on that connection are dropped; the requests get through
    rule = ["-p", "tcp", "-o", "lo", "--sport", str(tcp_redis), "--dport", str(local_port), "-j", "DROP"]
    _iptables("-I", rule)
    try:
        result = tables.complete(worker, Completion(task, [(out, 5)], [], None, event, {"tasks": 1}))
    finally:
        _iptables("-D", rule)
    assert result == 1
    assert tables.locate([out]) == [worker]
    assert int(r.hget(tables.k("stats"), "tasks") or 0) == 2  # the warm-up and this one, once
