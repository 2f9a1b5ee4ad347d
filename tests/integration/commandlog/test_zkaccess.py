"""Each pipeline's own ZooKeeper identity, on a real server started with a super digest: another pipeline's
command log and checkpoints can be neither read nor written, nor its path squatted, and the state is
unchanged afterwards."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

from ftpipeline.checkpoint.pointer import CheckpointPointer
from ftpipeline.commandlog import zkaccess
from ftpipeline.commandlog.zkclient import connect, with_identity
from ftpipeline.commandlog.zklog import CommandLog, base_path
from ftpipeline.embedded.zookeeper import EmbeddedZooKeeper
from ftpipeline.lineage.naming import store_user

SUPER = "super-secret"
A, B = "team-a.clicks.uid-1", "team-b.clicks.uid-2"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedZooKeeper]:
    zk = EmbeddedZooKeeper(tmp_path_factory.mktemp("zk-acl"), super_digest=zkaccess.super_digest(SUPER)).start()
    yield zk
    zk.stop()


def _as(server: EmbeddedZooKeeper, user: str, password: str) -> KazooClient:
    return connect(with_identity(server.connect, user, password), start_timeout_s=30)


def _snapshot(zk: KazooClient, path: str) -> dict[str, bytes]:
    data, _ = zk.get(path)
    out = {path: data}
    for child in zk.get_children(path):
        out.update(_snapshot(zk, f"{path}/{child}"))
    return out


def test_a_pipeline_writes_its_own_znodes_and_cannot_touch_anothers(server: EmbeddedZooKeeper) -> None:
    admin = _as(server, zkaccess.SUPER_USER, SUPER)
    for key, password in ((A, "pw-a"), (B, "pw-b")):
        zkaccess.grant(admin, key, password)
    a, b = _as(server, store_user(A), "pw-a"), _as(server, store_user(B), "pw-b")
    CheckpointPointer(b, B).commit({"epoch": 1, "step": 5})  # B's own checkpoint, as its coordinator commits it
    CheckpointPointer(a, A).commit({"epoch": 1, "step": 3})
    before = _snapshot(admin, base_path(B))

    theirs = CheckpointPointer(a, B)
    for attempt in (lambda: theirs.latest(), lambda: theirs.commit({"epoch": 2, "step": 9}),
                    lambda: a.set(f"{base_path(B)}/latest", b"9"), lambda: a.delete(base_path(B), recursive=True),
                    lambda: a.create(f"{base_path(B)}/checkpoints/99", b"{}"),
                    lambda: a.create("/ftpipeline/team-c.squat.uid-3", b"")):
        with pytest.raises(NoAuthError):
            attempt()
    # nor without any identity
    anonymous = connect(server.connect, start_timeout_s=30)
    with pytest.raises(NoAuthError):
        anonymous.get(f"{base_path(B)}/latest")
    assert _snapshot(admin, base_path(B)) == before
    # its own path it runs as a fresh run does: cleared (the base stays, as only the operator may remove
    # it), a command log appended, a checkpoint committed
    CheckpointPointer(a, A).clear(keep_base=True)
    CommandLog(a, A).append("run-started", run="r1")
    CheckpointPointer(a, A).commit({"epoch": 1, "step": 3})
    assert CheckpointPointer(a, A).latest_epoch() == 1
    for client in (a, b, anonymous, admin):
        client.stop()
        client.close()


def test_granting_again_takes_back_znodes_written_before_acls(server: EmbeddedZooKeeper) -> None:
    key = "team-d.old.uid-4"
    open_client = connect(server.connect, start_timeout_s=30)
    admin = _as(server, zkaccess.SUPER_USER, SUPER)
    admin.ensure_path(base_path(key))
    admin.set_acls(base_path(key), [zkaccess.make_digest_acl("x", "y", all=True)])
    admin.create(f"{base_path(key)}/log", b"old", acl=zkaccess.READ_ACL_UNSAFE)
    zkaccess.grant(admin, key, "pw-d")
    with pytest.raises(NoAuthError):
        open_client.get(f"{base_path(key)}/log")
    mine = _as(server, store_user(key), "pw-d")
    assert mine.get(f"{base_path(key)}/log")[0] == b"old"
    mine.set(f"{base_path(key)}/log", b"new")
    for client in (open_client, admin, mine):
        client.stop()
        client.close()
