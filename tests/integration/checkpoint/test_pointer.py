"""Committing a checkpoint in a real ZooKeeper: all or nothing, even when the session expires."""

from __future__ import annotations

import random
import threading
import uuid

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException

from ftpipeline.checkpoint.pointer import CheckpointPointer, CommitFailed


def expire_session(zk: KazooClient, hosts: str) -> None:
    """Make the server expire ``zk``'s session: attach a second client to it and close that one."""
    session_id, password = zk.client_id
    other = KazooClient(hosts=hosts, client_id=(session_id, password))
    other.start(timeout=10)
    other.stop()
    other.close()


def manifest(epoch: int) -> dict[str, object]:
    return {"epoch": epoch, "boundary": epoch * 10, "offsets": {"src.0": epoch * 100}, "gt_last": epoch * 10,
            "states": {"agg.0": {"channel": "agg.0", "step": epoch * 10, "path": f"epoch-{epoch}/state/agg.0.parquet",
                                 "rows": 3, "bytes": 10}}, "inflight": {}}


def test_a_session_expiry_never_leaves_a_half_committed_checkpoint(zookeeper: str) -> None:
    pipeline = f"p{uuid.uuid4().hex[:8]}"
    observer = KazooClient(hosts=zookeeper)
    observer.start(timeout=10)
    check = CheckpointPointer(observer, pipeline)
    rng = random.Random(3)
    committed = 0
    outcomes = {"committed": 0, "refused": 0}
    for epoch in range(1, 31):
        zk = KazooClient(hosts=zookeeper, timeout=4.0)
        zk.start(timeout=10)
        pointer = CheckpointPointer(zk, pipeline)
        pointer._ensure()
        killer = threading.Timer(rng.uniform(0, 0.01), expire_session, args=(zk, zookeeper))
        killer.start()
        try:
            pointer.commit(manifest(epoch))
            outcome = "committed"
        except (CommitFailed, KazooException):
            outcome = "refused"
        killer.join()
        zk.stop()
        zk.close()
        latest = check.latest_epoch()
        # all or nothing: the pointer moved iff the manifest exists, and it is whole
        if latest == epoch:
            assert check.manifest(epoch) == manifest(epoch)
            committed = epoch
            outcomes["committed"] += 1
        else:
            assert latest == committed
            assert check.manifest(epoch) is None
            assert outcome == "refused"
            outcomes["refused"] += 1
    observer.stop()
    observer.close()
    # both branches were exercised: some commits won the race, some lost their session first
    assert outcomes["committed"] > 0 and outcomes["refused"] > 0, outcomes


def test_two_coordinators_cannot_both_move_latest_from_the_same_value(zookeeper: str) -> None:
    pipeline = f"p{uuid.uuid4().hex[:8]}"
    clients = [KazooClient(hosts=zookeeper) for _ in range(2)]
    for c in clients:
        c.start(timeout=10)
    a, b = (CheckpointPointer(c, pipeline) for c in clients)
    a.commit(manifest(1))
    version = a._ensure()
    assert b._ensure() == version
    # both read latest at the same version; only the first transaction may move it
    tx_a, tx_b = clients[0].transaction(), clients[1].transaction()
    for tx, epoch in ((tx_a, 2), (tx_b, 3)):
        tx.create(f"/ftpipeline/{pipeline}/checkpoints/{epoch}", b"{}")
        tx.set_data(f"/ftpipeline/{pipeline}/latest", str(epoch).encode(), version=version)
    first, second = tx_a.commit(), tx_b.commit()
    assert not any(isinstance(r, Exception) for r in first)
    assert all(isinstance(r, Exception) for r in second)
    assert a.latest_epoch() == 2 and a.manifest(3) is None
    for c in clients:
        c.stop()
        c.close()


def test_prune_and_clear(zookeeper: str) -> None:
    zk = KazooClient(hosts=zookeeper)
    zk.start(timeout=10)
    pointer = CheckpointPointer(zk, f"p{uuid.uuid4().hex[:8]}")
    for epoch in (1, 2, 3):
        pointer.commit(manifest(epoch))
    pointer.prune({2, 3})
    assert pointer.manifest(1) is None and pointer.manifest(2) is not None
    assert pointer.latest() == manifest(3)
    pointer.clear()
    assert pointer.latest() is None
    zk.stop()
    zk.close()
