"""A worker as a peer of the command log: heartbeat, two-phase join, ring watch, peer GC.

Pod deletion events (and process exits) do not see a worker that hangs or is
cut off while its pod still exists. Its heartbeat does: each peer holds an
*ephemeral* znode under ``peers/``, which ZooKeeper deletes when the peer's
session expires — a peer that stops answering (SIGSTOP, a partition, a hung
process) loses it after the session timeout. Each member watches its ring
successor's heartbeat (``state.watches``) and, when it vanishes, appends a
``leave`` command; folding that, the watcher now watches the dead peer's
successor. The coordinator follows the log and recovers like it does for a
deleted pod.

The peer reacts to the *state*, not to single commands, so a reaction that
was due is never missed when a compaction hides the command that made it
due::

    STARTING --heartbeat created, peer-gc appended--> GC
    GC       --own peer-gc folded: leave for every member without a heartbeat; prepare-join--> JOINING
    JOINING  --prepared: watch the target, notify-watchers--> JOINING (notified)
    JOINING  --accept-join folded--> MEMBER
    JOINING  --join aborted (target left / no candidate)--> GC (after a short pause)
    MEMBER   --watched heartbeat gone--> MEMBER (appends leave; watches the next one)
    MEMBER   --no longer a member (declared dead; a new run started)--> FENCED (``on_fenced``)
    MEMBER   --a new run started and kept it (its coordinator took this worker over)--> MEMBER
    any      --session expired (LOST), or removed by the ring for an expired heartbeat,
               and ``still_member()``--> STARTING again as a new incarnation (a fresh heartbeat,
               peer-gc, a two-phase join): a ZooKeeper restart or cut, not a death
    any      --session expired, or removed, and not ``still_member()``--> FENCED

``still_member`` is the worker's own authority on whether the run still
counts it (the sidecar asks the lineage tables' ``alive`` set, which the
coordinator's recovery plan empties of a worker it declared dead). A
session that expired while the worker was alive is the ensemble's fault;
the coordinator, which confirms every reported death by calling the worker
(``coordinator.py``), has not declared it dead, so it comes back. One that
expired because the worker hung is different: the coordinator could not
reach it either, recovered without it, and it finds itself fenced.

A member that must accept a notified joiner checks the joiner still has a
heartbeat; if not, it appends ``abort-join`` (the joiner died while joining).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import NodeExistsError, NoNodeError

from ftpipeline.commandlog.state import ClusterState
from ftpipeline.commandlog.zklog import CommandLog, Follower

log = logging.getLogger("ftpipeline.peer")


FULL_READ_S = 5.0  # a peer lists the whole log this often even when its watch says nothing changed
RING_REASONS = ("heartbeat expired", "peer-gc")  # a peer's report of a vanished heartbeat, not a coordinator's verdict


def peer_id(worker: str) -> str:
    """A worker's identity in the ring: its name plus an incarnation, so a restart is a new peer."""
    return f"{worker}.{uuid.uuid4().hex[:8]}"


class Peer:
    def __init__(self, zk: KazooClient, pipeline: str, worker: str, on_fenced: Callable[[str], None],
                 retry_s: float = 0.5, still_member: Callable[[], bool] = lambda: False) -> None:
        self.zk = zk
        self.log = CommandLog(zk, pipeline)
        self.worker = worker
        self.id = peer_id(worker)
        self.on_fenced = on_fenced
        self.still_member = still_member
        self._expired = threading.Event()
        self.retry_s = retry_s
        self.phase = "starting"
        self.follower: Follower | None = None
        self.wake = threading.Event()
        self.stopped = threading.Event()
        self._gc_seq: int | None = None
        self._prepare_seq: int | None = None
        self._was_member = False
        self._notified_for: str | None = None
        self._watching: str | None = None
        self._reported: set[str] = set()
        self._accepted: set[str] = set()
        self._retry_at = 0.0
        self._full_read_at = 0.0
        self._run_epoch: int | None = None
        self._thread: threading.Thread | None = None

    def heartbeat_path(self, peer: str) -> str:
        return f"{self.log.peers}/{peer}"

    def alive(self, peer: str) -> bool:
        return self.zk.exists(self.heartbeat_path(peer)) is not None

    # --- life cycle ------------------------------------------------------------
    def start(self) -> Peer:
        self._register()
        self.zk.add_listener(self._on_session)
        self.follower = Follower(self.log, on_change=self.wake.set)
        self._run_epoch = self.follower.state.run_epoch
        self._gc_seq = self.log.append("peer-gc", peer=self.id, worker=self.worker)
        self.phase = "gc"
        self._thread = threading.Thread(target=self._loop, name="peer", daemon=True)
        self._thread.start()
        log.info("peer started", extra={"peer": self.id, "worker": self.worker})
        return self

    def _register(self) -> None:
        data = json.dumps({"worker": self.worker, "pid": os.getpid(), "host": socket.gethostname()}).encode()
        try:
            self.zk.create(self.heartbeat_path(self.id), data, ephemeral=True)
        except NodeExistsError:
            pass

    def _come_back_or_fence(self, why: str) -> None:
        """The ring lost this peer (its session expired): rejoin as a new incarnation if the run still
        counts this worker, else stay out (``still_member``)."""
        if not self.still_member():
            self._fence(f"{why}, and the run no longer counts this worker")
            return
        old = self.id
        self._expired.clear()  # whichever way it was seen (LOST, or the ring's leave), it is handled once
        try:
            self.zk.delete(self.heartbeat_path(old))  # gone with the old session, unless that is this one
        except NoNodeError:
            pass
        self.id = peer_id(self.worker)
        self._register()
        self._gc_seq = self.log.append("peer-gc", peer=self.id, worker=self.worker)
        self._prepare_seq = None
        self._was_member = False
        self._notified_for = None
        self._watching = None
        self._reported, self._accepted = set(), set()
        self.phase = "gc"
        log.warning("re-registered after losing the heartbeat", extra={"peer": self.id, "was": old,
                                                                        "worker": self.worker, "why": why})

    def stop(self) -> None:
        self.stopped.set()
        self.wake.set()
        if self.follower is not None:
            self.follower.stop()

    def _on_session(self, state: str) -> None:
        """Called on kazoo's thread: no ZooKeeper call here, the loop handles it once connected."""
        if state == KazooState.LOST and not self.stopped.is_set():
            self._expired.set()
            self.wake.set()

    def _fence(self, reason: str) -> None:
        if self.phase == "fenced":
            return
        self.phase = "fenced"
        log.error("fenced", extra={"peer": self.id, "worker": self.worker, "reason": reason})
        self.stopped.set()
        self.wake.set()
        self.on_fenced(reason)

    # --- reacting to the state ---------------------------------------------------
    def _loop(self) -> None:
        while not self.stopped.is_set():
            self.wake.wait(0.5)
            self.wake.clear()
            if self.stopped.is_set():
                return
            try:
                assert self.follower is not None
                if self._expired.is_set():
                    if not self.zk.connected:
                        continue  # kazoo reconnects with a new session (commandlog/zkclient.py)
                    self._expired.clear()
                    self._come_back_or_fence("the ZooKeeper session expired")
                    continue
                if time.monotonic() >= self._full_read_at:  # the safety net under the watch
                    self._full_read_at = time.monotonic() + FULL_READ_S
                    self.follower.refresh()
                elif self.follower.changed.is_set():
                    self.follower.catch_up()
                self.react(self.follower.state)
            except Exception as exc:  # a connection blip: the next wake tries again
                log.warning("peer step failed", extra={"peer": self.id, "error": repr(exc)})
                self._full_read_at = 0.0  # what the failed read missed: read it all next time
                time.sleep(0.2)
                self.wake.set()

    def react(self, s: ClusterState) -> None:
        me = self.id
        if self._run_epoch is not None and s.run_epoch != self._run_epoch and (self._was_member or me in s.prepared) \
                and me not in s.members:
            self._fence(f"a new run (epoch {s.run_epoch}) started without this worker")
            return
        self._run_epoch = s.run_epoch
        if self._gc_seq is not None and s.seq >= self._gc_seq and self._prepare_seq is None:
            for peer in sorted(s.members):  # peer GC: members nobody reported dead
                if peer not in self._reported and not self.alive(peer):
                    self._reported.add(peer)
                    self.log.append("leave", peer=peer, worker=s.members[peer], by=me, reason="peer-gc")
            self._prepare_seq = self.log.append("prepare-join", peer=me, worker=self.worker)
            self.phase = "joining"
            return
        if me in s.members:
            if not self._was_member:
                self._was_member = True
                self.phase = "member"
                log.info("joined the ring", extra={"peer": me, "watches": s.watches.get(me)})
            self._watch(s.watches.get(me))
            for joiner in sorted(s.notified):
                if s.acceptor(joiner) == me and joiner not in self._accepted:
                    self._accepted.add(joiner)
                    if self.alive(joiner):
                        self.log.append("accept-join", peer=joiner, by=me)
                    else:
                        self.log.append("abort-join", peer=joiner, by=me, reason="joiner died while joining")
            return
        if self._was_member:
            reason = next((r for p, _, r in reversed(s.left) if p == me), "removed from the ring")
            if reason in RING_REASONS:  # the ring saw the heartbeat go: perhaps only the session died
                self._come_back_or_fence(f"removed from the ring ({reason})")
            else:
                self._fence(f"declared dead by the cluster ({reason})")
            return
        if self._prepare_seq is not None and s.seq >= self._prepare_seq:
            target = s.prepared.get(me)
            if target is not None:
                if self._notified_for != target:
                    self._notified_for = target
                    self._watch(target)
                    self.log.append("notify-watchers", peer=me, target=target)
                return
            if me not in s.joining and time.monotonic() >= self._retry_at:  # aborted: try again
                self._retry_at = time.monotonic() + self.retry_s
                self._notified_for = None
                self._gc_seq = self.log.append("peer-gc", peer=me, worker=self.worker)
                self._prepare_seq = None
                self.phase = "gc"

    def _watch(self, target: str | None) -> None:
        if target == self._watching:
            return
        self._watching = target
        if target is None:
            return

        def fired(data: bytes | None, stat: object) -> bool:
            if self._watching != target or self.stopped.is_set():
                return False  # stop watching: we moved on
            if stat is None:
                self._report(target)
                return False
            return True

        self.zk.DataWatch(self.heartbeat_path(target), fired)

    def _report(self, target: str) -> None:
        if target in self._reported:
            return
        self._reported.add(target)
        assert self.follower is not None
        worker = self.follower.state.members.get(target) or self.follower.state.joining.get(target, "")
        log.warning("heartbeat expired", extra={"peer": self.id, "dead": target, "worker": worker})
        try:
            self.log.append("leave", peer=target, worker=worker, by=self.id, reason="heartbeat expired")
        except Exception as exc:
            log.error("could not report a dead peer", extra={"dead": target, "error": repr(exc)})
            self._reported.discard(target)
        self.wake.set()
