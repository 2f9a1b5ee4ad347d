"""The command log on a real ZooKeeper: one order for concurrent writers, compaction, peers and the ring."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator

import pytest
from kazoo.client import KazooClient

from ftpipeline.commandlog.peer import Peer
from ftpipeline.commandlog.state import ClusterState, fold
from ftpipeline.commandlog.zklog import CommandLog, Follower


def client(zookeeper: str, timeout: float = 10.0) -> KazooClient:
    zk = KazooClient(hosts=zookeeper, timeout=timeout)
    zk.start(timeout=10)
    return zk


@pytest.fixture
def zk(zookeeper: str) -> Iterator[KazooClient]:
    c = client(zookeeper)
    yield c
    c.stop()
    c.close()


def wait_for(cond, timeout_s: float = 20.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        time.sleep(0.05)


def test_concurrent_writers_and_readers_agree_and_a_snapshot_plus_tail_equals_the_whole_log(
    zookeeper: str, zk: KazooClient
) -> None:
    name = f"log{uuid.uuid4().hex[:8]}"
    clients = [client(zookeeper) for _ in range(4)]
    logs = [CommandLog(c, name) for c in clients]

    def write(i: int) -> None:
        for step in range(1, 41):
            logs[i].append("step-started", step=step, offsets={f"s.{i}": [step - 1, step]})
            if i == 0:
                logs[i].append("step-committed", step=step)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    full_log = logs[1].read_after(-1)
    assert full_log is not None and len(full_log) == 4 * 40 + 40
    whole = fold(full_log)
    assert all(CommandLog(c, name).load() == whole for c in clients)  # every reader, the same state
    # compact at some point in the middle, then read again: snapshot + tail == the whole log
    middle = fold(full_log[:77])
    logs[2].compact(middle)
    assert logs[3].znodes() == len(full_log) - 77
    assert logs[3].load() == whole
    assert logs[3].snapshot() == ClusterState.from_json(middle.to_json())
    for c in clients:
        c.stop()
        c.close()


def test_a_follower_behind_a_compaction_continues_from_the_snapshot(zk: KazooClient, zookeeper: str) -> None:
    name = f"log{uuid.uuid4().hex[:8]}"
    log = CommandLog(zk, name)
    other = client(zookeeper)
    follower = Follower(CommandLog(other, name))
    for step in range(1, 101):
        log.append("step-started", step=step, offsets={"s.0": [step - 1, step]})
        log.append("step-committed", step=step)
        if step % 25 == 0:
            log.compact(log.load())
    assert log.znodes() == 0
    follower.refresh()
    assert follower.state.committed == 100 and follower.state == log.load()
    other.stop()
    other.close()


def test_a_compaction_racing_another_deletes_the_rest_and_the_log_still_folds_whole(zk: KazooClient) -> None:
    """Compaction deletes in transactions; when another compactor took some commands first, the
    transaction fails as a whole and the rest go one by one."""
    log = CommandLog(zk, f"log{uuid.uuid4().hex[:8]}")
    for step in range(1, 61):
        log.append("step-started", step=step, offsets={"s.0": [step - 1, step]})
        log.append("step-committed", step=step)
    whole = log.load()
    commands = log.read_after(-1)
    assert commands is not None
    for cmd in commands[10:20]:  # the other compactor's work, part done
        zk.delete(f"{log.dir}/c-{cmd.seq:010d}")
    assert log.compact(fold(commands[:100])) == 90
    assert log.znodes() == 20 and log.load() == whole


def test_a_follower_catching_up_from_its_watch_folds_every_command_across_compactions(
        zk: KazooClient, zookeeper: str) -> None:
    """catch_up folds from the list the watch delivered and skips the snapshot while the numbers run
    on; a compaction that passes it in between must still leave it equal to the whole log."""
    name = f"log{uuid.uuid4().hex[:8]}"
    log = CommandLog(zk, name)
    other = client(zookeeper)
    follower = Follower(CommandLog(other, name))
    reads: list[str] = []
    real_get = other.get
    other.get = lambda path, *a, **k: (reads.append(path), real_get(path, *a, **k))[1]  # type: ignore[method-assign]
    for step in range(1, 61):
        log.append("step-started", step=step, offsets={"s.0": [step - 1, step]})
        log.append("step-committed", step=step)
        if step % 20 == 0:  # the follower lags: the compaction deletes commands it has not read
            log.compact(log.load())
        elif step % 3 == 0:
            wait_for(follower.changed.is_set)
            follower.catch_up()
            assert follower.state.committed <= step
    wait_for(lambda: follower.changed.is_set() or follower.state == log.load())
    follower.catch_up()
    wait_for(lambda: follower.catch_up() is not None and follower.state == log.load())
    assert follower.state.committed == 60
    snapshot_reads = [r for r in reads if r.endswith("log-snapshot")]
    command_reads = [r for r in reads if "/log/" in r]
    # 17 catch-ups in the loop: only those behind one of the 3 compactions (and the waits' last ones) look
    assert command_reads and len(snapshot_reads) <= 8, (len(snapshot_reads), len(command_reads))
    other.stop()
    other.close()


def test_peers_form_a_ring_and_a_silent_peer_is_reported_by_its_watcher(zookeeper: str, zk: KazooClient) -> None:
    name = f"ring{uuid.uuid4().hex[:8]}"
    fenced: list[str] = []
    sessions = [client(zookeeper, timeout=2.0) for _ in range(4)]
    peers = [Peer(s, name, f"w{i}", on_fenced=fenced.append).start() for i, s in enumerate(sessions)]
    log = CommandLog(zk, name)
    wait_for(lambda: len(log.load().members) == 4)
    state = log.load()
    assert state.is_ring(), state
    # w2 goes silent: its session ends without a goodbye (as a SIGSTOPped process's would expire)
    victim = peers[2]
    watcher = state.watcher_of(victim.id)
    victim.stop()
    sessions[2].stop()
    wait_for(lambda: victim.id not in log.load().members)
    after = log.load()
    [(peer, worker, reason)] = [x for x in after.left if x[0] == victim.id]
    assert (worker, reason) == ("w2", "heartbeat expired")
    assert after.is_ring() and after.watches[watcher] == state.watches[victim.id]  # the gap closed transitively
    for p, s in zip(peers, sessions):
        p.stop()
        s.stop()
        s.close()
    assert not fenced


def test_a_new_peer_collects_members_that_died_unreported(zookeeper: str, zk: KazooClient) -> None:
    """Onyx's peer GC: every member died and nobody could report it; a joiner cleans up and joins alone."""
    name = f"gc{uuid.uuid4().hex[:8]}"
    log = CommandLog(zk, name)
    for p in ("dead-a", "dead-b"):
        log.append("prepare-join", peer=p, worker=p)
    log.append("notify-watchers", peer="dead-b")
    log.append("accept-join", peer="dead-b")
    assert set(log.load().members) == {"dead-a", "dead-b"}
    session = client(zookeeper)
    peer = Peer(session, name, "w9", on_fenced=lambda r: None).start()
    wait_for(lambda: set(log.load().members) == {peer.id})
    assert {x[2] for x in log.load().left} == {"peer-gc"}
    peer.stop()
    session.stop()
    session.close()


def test_a_peer_declared_dead_is_fenced(zookeeper: str, zk: KazooClient) -> None:
    name = f"fence{uuid.uuid4().hex[:8]}"
    fenced: list[str] = []
    sessions = [client(zookeeper) for _ in range(2)]
    peers = [Peer(s, name, f"w{i}", on_fenced=fenced.append).start() for i, s in enumerate(sessions)]
    log = CommandLog(zk, name)
    wait_for(lambda: len(log.load().members) == 2)
    log.append("leave", peer=peers[1].id, worker="w1", by="test", reason="declared dead")
    wait_for(lambda: bool(fenced))
    assert "declared dead" in fenced[0] and peers[1].phase == "fenced" and peers[0].phase == "member"
    for p, s in zip(peers, sessions):
        p.stop()
        s.stop()
        s.close()


def test_a_new_run_fences_the_peers_it_does_not_keep_and_the_kept_ones_watch_each_other(
        zookeeper: str, zk: KazooClient) -> None:
    """A coordinator that took two of three running workers over: the third stops, the two stay a ring."""
    name = f"kept{uuid.uuid4().hex[:8]}"
    fenced: dict[str, str] = {}
    sessions = [client(zookeeper, timeout=2.0) for _ in range(3)]
    peers = [Peer(s, name, f"w{i}", on_fenced=lambda r, w=f"w{i}": fenced.setdefault(w, r)).start()
             for i, s in enumerate(sessions)]
    log = CommandLog(zk, name)
    wait_for(lambda: len(log.load().members) == 3)
    before = log.load()
    log.append("run-started", run_epoch=before.run_epoch + 1, epoch=before.epoch + 1, fresh=False,
               kept=[peers[0].id, peers[2].id])
    wait_for(lambda: "w1" in fenced)
    time.sleep(1.5)  # every peer has reacted to the new run by now (they read the log at least every 0.5 s)
    assert set(fenced) == {"w1"} and "new run" in fenced["w1"], fenced
    assert peers[0].phase == peers[2].phase == "member"
    state = log.load()
    assert state.members == {peers[0].id: "w0", peers[2].id: "w2"} and state.is_ring()
    # the kept ring still reports a death: w2 goes silent, w0 (its watcher now) says so
    peers[2].stop()
    sessions[2].stop()
    wait_for(lambda: peers[2].id not in log.load().members)
    assert [x[2] for x in log.load().left if x[0] == peers[2].id] == ["heartbeat expired"]
    for p, s in zip(peers, sessions):
        p.stop()
        s.stop()
        s.close()


def test_a_late_peer_reaches_the_current_state_quickly(zookeeper: str, zk: KazooClient) -> None:
    """500 steps with compaction every 50 commands: a new reader loads a snapshot and a short tail."""
    name = f"late{uuid.uuid4().hex[:8]}"
    log = CommandLog(zk, name)
    appended = 0
    for step in range(1, 501):
        log.append("step-started", step=step, offsets={f"src.{i}": [step * 100, step * 100 + 100] for i in range(4)})
        log.append("step-committed", step=step)
        appended += 2
        if appended >= 50:
            appended = 0
            log.compact(log.load())
    assert log.znodes() <= 50
    late = client(zookeeper)
    started = time.perf_counter()
    state = CommandLog(late, name).load()
    seconds = time.perf_counter() - started
    print(f"late peer: state at seq {state.seq} (committed {state.committed}) in {seconds * 1000:.1f} ms")
    assert state.committed == 500
    late.stop()
    late.close()


def _wide_state(channels: int, steps: int) -> ClusterState:
    """Offsets of ``channels`` source channels for ``steps`` steps, none covered by a checkpoint."""
    from ftpipeline.commandlog.state import Command

    commands = [Command(i + 1, "step-started",
                        {"step": i + 1, "offsets": {f"src.{c}": [i * 1000, (i + 1) * 1000] for c in range(channels)}})
                for i in range(steps)]
    return fold(commands)


def test_a_snapshot_past_zookeepers_znode_limit_is_written_in_parts_and_reads_back_whole(zk: KazooClient) -> None:
    """500 source channels x 200 steps of offsets: one znode would pass ZooKeeper's 1 MB."""
    log = CommandLog(zk, f"log{uuid.uuid4().hex[:8]}")
    state = _wide_state(500, 200)
    assert len(state.to_json()) > 1024 * 1024
    log.compact(state)
    sizes = log.znode_sizes()
    assert max(sizes.values()) <= 512 * 1024 and len(sizes) > 2
    assert log.load() == state


def test_a_newer_snapshot_replaces_the_parts_of_the_older(zk: KazooClient, zookeeper: str) -> None:
    log = CommandLog(zk, f"log{uuid.uuid4().hex[:8]}")
    other = client(zookeeper)
    follower = Follower(CommandLog(other, log.base.rsplit("/", 1)[1]))
    first = _wide_state(400, 200)
    log.compact(first)
    parts_of_first = set(log.znode_sizes()) - {log.snapshot_path}
    second = _wide_state(400, 220)
    log.compact(second)
    parts = set(log.znode_sizes()) - {log.snapshot_path}
    assert parts and not parts & parts_of_first  # the older snapshot's parts are gone
    follower.refresh()
    assert follower.state == second == log.load()
    other.stop()
    other.close()
