"""What a coordinator needs besides workers: the lineage store, the step log, the checkpoint pointer.

``ftpipeline run`` and the operator's per-pipeline daemon open a run the
same way, here: connect to Redis and ZooKeeper (or, for ``ftpipeline run``
with no address configured, start private ones), and either start fresh —
Feldera's *create*: no lineage, no step log, no checkpoints — or resume,
keeping the step log, the command log and the committed checkpoints so the
coordinator can open the newest one every worker has and replay the steps
after it, with the offsets the command log recorded.

    (none) --open_session(resuming=False)--> FRESH (history cleared)
    (none) --open_session(resuming=True)-->  RESUMING (checkpoints and step log kept; a private Redis
                                             and ZooKeeper a killed run left serving are kept)
    FRESH | RESUMING --close()--> CLOSED (private servers stopped)
"""

from __future__ import annotations

import secrets
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import redis
from kazoo.client import KazooClient

from ftpipeline.checkpoint.pointer import CheckpointPointer
from ftpipeline.commandlog import zkaccess
from ftpipeline.commandlog.zkclient import ConnectString
from ftpipeline.commandlog.zkclient import connect as zk_connect
from ftpipeline.commandlog.zklog import CommandLog, base_path
from ftpipeline.control.redisclient import connect as redis_connect
from ftpipeline.control.redisclient import reachable as redis_reachable
from ftpipeline.control.store import RunStore
from ftpipeline.embedded.private import write_private
from ftpipeline.embedded.redis import EmbeddedRedis
from ftpipeline.embedded.zookeeper import EmbeddedZooKeeper
from ftpipeline.lineage.tables import LineageTables
from ftpipeline.spec.model import PipelineSpec


@dataclass
class Session:
    spec: PipelineSpec
    redis_url: str
    client: redis.Redis
    tables: LineageTables
    store: RunStore
    zookeeper: str | None = None
    zk: KazooClient | None = None
    pointer: CheckpointPointer | None = None
    commands: CommandLog | None = None
    private: list[EmbeddedRedis | EmbeddedZooKeeper] = field(default_factory=list)
    resuming: bool = False

    def close(self) -> None:
        self.client.close()
        if self.zk is not None:
            self.zk.stop()
            self.zk.close()
        for server in reversed(self.private):
            server.stop()


def open_session(spec: PipelineSpec, resuming: bool, private_dir: Path | None = None,
                 resume_if_started: bool = False) -> Session:
    """Connect to ``spec.redis_url`` and ``spec.zookeeper``; without an address, start a private server
    under ``private_dir`` (``ftpipeline run`` only; the operator always has addresses). A fresh start
    removes the pipeline's znodes; its checkpoint storage, which only its workers mount, is emptied by a
    worker once they joined (``coordinator.py``).

    ``resume_if_started`` (the operator): a pipeline whose command log already holds a committed step —
    keyed by its uid, so it can only be its own — is resumed even when the caller thought it fresh (an
    operator that died before its status recorded the commit)."""
    private: list[EmbeddedRedis | EmbeddedZooKeeper] = []
    url = spec.redis_url
    try:
        if url is None:
            if private_dir is None:
                raise ValueError("no Redis address (spec.redis.url) and no place for a private Redis")
            embedded = EmbeddedRedis(private_dir / "redis")
            if not (resuming and embedded.adopt()):  # a resume keeps what a killed run left serving
                embedded.start()
            private.append(embedded)
            url = embedded.url
        redis_reachable(url)
        client = redis_connect(url)
        session = Session(spec, url, client, LineageTables(client, spec.store_key), RunStore(client, spec.store_key),
                          private=private, resuming=resuming)
        # lineage never survives a (re)start: the checkpoints and the step log do, and on a resume the
        # addresses of workers that may still run, which the coordinator may take over (admission.py)
        registry = session.store.workers() if resuming else {}
        session.tables.clear()
        for worker, info in registry.items():
            session.store.register(worker, info)
        session.store.mark_generation(uuid.uuid4().hex[:12])
        if spec.needs_zookeeper:
            connect = spec.zookeeper
            if connect is None:
                if private_dir is None:
                    raise ValueError("no ZooKeeper address (spec.zookeeper.connect) and no place for a private one")
                connect = _private_zookeeper(private_dir / "zookeeper", spec.store_key, private, resuming)
            session.zookeeper = connect
            session.zk = zk_connect(connect, timeout_s=10.0)
            session.pointer = CheckpointPointer(session.zk, spec.store_key)
            if not resuming and resume_if_started and session.zk.exists(f"{base_path(spec.store_key)}/log"):
                resuming = CommandLog(session.zk, spec.store_key).load().committed > 0
            session.resuming = resuming
            if not resuming:  # the pipeline's znodes (checkpoints, command log) go with it
                session.pointer.clear(keep_base=True)
            if spec.fault_tolerance:
                session.commands = CommandLog(session.zk, spec.store_key)
        return session
    except BaseException:
        for server in reversed(private):
            server.stop()
        raise


def _private_zookeeper(directory: Path, store_key: str, private: list[EmbeddedRedis | EmbeddedZooKeeper],
                       resuming: bool = False) -> str:
    """Start a ZooKeeper for this run alone: on the loopback interface, its super user's password and the
    pipeline's made up now (a restart re-owns every znode with new ones), every znode readable and writable
    by the pipeline's identity alone (``zkaccess.grant``). Returns the pipeline's connect string, credentials
    included: it reaches the sidecars through their environment only, and a file only its owner reads,
    from which a resume (``resuming``) that finds the server a killed run left still serving keeps it and
    its credentials, as the workers it takes over know them."""
    server = EmbeddedZooKeeper(directory)
    kept = directory / "pipeline.connect"
    if resuming and kept.exists() and server.adopt():
        private.append(server)
        return kept.read_text()
    super_password, password = secrets.token_urlsafe(18), secrets.token_urlsafe(18)
    server = EmbeddedZooKeeper(directory, super_digest=zkaccess.super_digest(super_password)).start()
    private.append(server)
    hosts = server.connect
    admin = zk_connect(str(ConnectString(hosts, (zkaccess.SUPER_USER, super_password))), timeout_s=10.0)
    try:
        user = zkaccess.grant(admin, store_key, password, private=True)
    finally:
        admin.stop()
        admin.close()
    connect = str(ConnectString(hosts, (user, password)))
    write_private(kept, connect.encode())
    return connect
