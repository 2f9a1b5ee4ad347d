"""The command log in ZooKeeper: sequential znodes, a snapshot, and readers that follow it.

Layout, per pipeline::

    /ftpipeline/<pipeline>/log/c-<10 digits>   one command (JSON); the digits are its sequence number
    /ftpipeline/<pipeline>/log-snapshot         {"seq": N, "state": ...}: the fold of every command <= N,
                                                or {"seq": N, "parts": P} when it is larger than one part
    /ftpipeline/<pipeline>/log-snapshot-parts/<N>-<i>   part i of P of snapshot N's state
    /ftpipeline/<pipeline>/peers/<peer>         ephemeral heartbeat of a worker (``peer.py``)
    /ftpipeline/<pipeline>/coordinator          who decides: the coordinator that claimed the log last

ZooKeeper numbers sequential children from the parent's change counter, so
the order of the numbers is the order in which the server accepted the
appends: one total order that every reader sees.

Compaction answers the seed's open question (a new peer would otherwise
replay the whole history): :meth:`CommandLog.compact` writes the fold up to
some N as the snapshot, then deletes the commands <= N (in transactions of
up to ``TXN_DELETES``, so followers wake once per batch). A reader loads the
snapshot and folds only the tail. Compaction may run while others read: a
reader that finds a command gone (``NoNodeError``), or a snapshot newer than
its position, reloads from the snapshot. (Sequence numbers are not
contiguous — the parent's counter also counts deletions — so a gap in the
numbers proves nothing. The converse does: when the first command after a
reader's position is numbered position + 1, nothing between was deleted, and
the reader need not look at the snapshot.)

Reading is the log's main cost: every append wakes every follower (the
coordinator and one peer per worker), two appends per step. A follower
therefore folds from the children list its watch delivered
(:meth:`Follower.catch_up`) instead of listing again, and skips the
snapshot when the numbers run on: one read of the new command per append.

    EMPTY --append--> LOG(tail) --compact(N)--> SNAPSHOT(N) + LOG(tail > N)

Only one coordinator may decide for a pipeline, but two can be alive: an
operator replica that lost its lease on a partitioned node, a coordinator
that was thought dead. So a coordinator *claims* the log before its first
decision (:meth:`CommandLog.claim`): it writes its name to the
``coordinator`` znode and keeps the version ZooKeeper gave that write. Each
of its appends is then one transaction, a check of that version and the
create of the command; once another coordinator has claimed the log, the
version moved on and the check refuses the whole transaction, so nothing of
a deposed coordinator's reaches the log (:class:`Deposed`):

    UNCLAIMED --claim--> CLAIMED(v) --append: check v + create--> CLAIMED(v)
    CLAIMED(v) --another claims--> the other's CLAIMED(v+1); this one's appends raise Deposed

Workers' ring commands (``peer.py``) are reports, not decisions, and are
appended unfenced by their own clients.

A snapshot holds the offsets of every source channel for each step since the
newest checkpoint; with enough channels that passes ZooKeeper's 1 MB per znode
(``jute.maxbuffer``), and a write past it fails. A large snapshot is therefore
cut into parts of ``PART_BYTES``, written first; the header then switches to
them in one write, so a reader sees the old snapshot or the new one, never a
mix; the parts of older snapshots are deleted after. A reader that finds a
part gone (a newer compaction replaced it meanwhile) reads the header again.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.interfaces import IAsyncResult
from kazoo.retry import KazooRetry

from ftpipeline.commandlog.state import KINDS, ClusterState, Command, apply

PREFIX = "c-"
TXN_DELETES = 500  # commands deleted per transaction by a compaction
PART_BYTES = 512 * 1024  # a snapshot larger than this is written as parts (ZooKeeper's znode limit is 1 MB)


ROOT = "/ftpipeline"  # every pipeline's znodes are under ROOT/<store key>


def base_path(pipeline: str) -> str:
    return f"{ROOT}/{pipeline}"


class Deposed(RuntimeError):
    """Another coordinator claimed the log after this one: this one's decisions are refused."""


class _Sent:
    """A fenced append sent without waiting: ``get`` gives the command's path once accepted, or raises
    :class:`Deposed` (the same contract as kazoo's ``create_async`` result)."""

    def __init__(self, log: "CommandLog", result: IAsyncResult) -> None:
        self.log, self.result = log, result

    def get(self, block: bool = True, timeout: float | None = None) -> str:
        return self.log._created(self.result.get(block, timeout))


class CommandLog:
    def __init__(self, zk: KazooClient, pipeline: str, retry: KazooRetry | None = None) -> None:
        self.zk = zk
        self.base = base_path(pipeline)
        self.dir = f"{self.base}/log"
        self.snapshot_path = f"{self.base}/log-snapshot"
        self.parts_dir = f"{self.base}/log-snapshot-parts"
        self.peers = f"{self.base}/peers"
        self.owner_path = f"{self.base}/coordinator"
        self.retry = retry or KazooRetry(max_tries=5, delay=0.05, max_delay=1.0)
        self.retry(self.zk.ensure_path, self.dir)
        self.retry(self.zk.ensure_path, self.peers)
        self.claimed: int | None = None  # the owner znode's version this client's claim wrote

    # --- writing -------------------------------------------------------------
    @staticmethod
    def _encode(kind: str, body: dict[str, Any]) -> bytes:
        if kind not in KINDS:
            raise ValueError(f"unknown command kind {kind!r}")
        return json.dumps({"k": kind, **body}, sort_keys=True).encode()

    def claim(self, owner: str) -> int:
        """Make this client the one whose appends are decisions: every later append is fenced by the
        version this write gives the owner znode, until another client claims the log."""
        self.retry(self.zk.ensure_path, self.owner_path)
        stat = self.retry(self.zk.set, self.owner_path, owner.encode())
        self.claimed = int(stat.version)
        return self.claimed

    def owner(self) -> str:
        """Who claimed the log last ("" if nobody has)."""
        try:
            data, _ = self.retry(self.zk.get, self.owner_path)
        except NoNodeError:
            return ""
        return bytes(data or b"").decode()

    def _fenced(self, data: bytes) -> Any:
        txn = self.zk.transaction()
        txn.check(self.owner_path, self.claimed)
        txn.create(f"{self.dir}/{PREFIX}", data, sequence=True)
        return txn

    def _created(self, outcome: Any) -> str:
        """The path a plain create gave, or a fenced one's transaction results checked."""
        if self.claimed is None:
            return str(outcome)
        check, created = outcome
        if isinstance(check, (BadVersionError, NoNodeError)):
            raise Deposed(f"the command log of {self.base} was claimed by {self.owner() or 'another'} "
                          f"after this coordinator (claim {self.claimed})")
        for result in (check, created):
            if isinstance(result, Exception):
                raise result
        return str(created)

    def append(self, kind: str, **body: Any) -> int:
        """Append one command; returns its sequence number once ZooKeeper has accepted it. After
        :meth:`claim`, only while the claim holds (else :class:`Deposed`)."""
        data = self._encode(kind, body)
        if self.claimed is None:
            path = self.retry(self.zk.create, f"{self.dir}/{PREFIX}", data, sequence=True)
        else:  # a transaction commits once: a retry builds another
            path = self._created(self.retry(lambda: self._fenced(data).commit()))
        return int(str(path).rsplit(PREFIX, 1)[1])

    def append_async(self, kind: str, **body: Any) -> IAsyncResult | _Sent:
        """Send one command without waiting; the result's ``get()`` gives its path once accepted.
        ZooKeeper applies one session's requests in the order they were sent."""
        data = self._encode(kind, body)
        if self.claimed is None:
            return self.zk.create_async(f"{self.dir}/{PREFIX}", data, sequence=True)
        return _Sent(self, self._fenced(data).commit_async())

    def compact(self, state: ClusterState) -> int:
        """Make ``state`` (a fold up to ``state.seq``) the snapshot and delete the commands it covers."""
        current = self._snapshot_seq()
        if current >= state.seq:
            return 0
        self._write_snapshot(state)
        covered = [n for n in self._children() if int(n[len(PREFIX):]) <= state.seq]
        if not covered:
            return 0
        # in transactions: one write to ZooKeeper's log and one wake-up of each follower per
        # TXN_DELETES commands, not per command (and each request well under ZooKeeper's 1 MB)
        def delete_all(names: list[str]) -> list[Any]:  # a transaction commits once: a retry builds another
            txn = self.zk.transaction()
            for name in names:
                txn.delete(f"{self.dir}/{name}")
            return list(txn.commit())

        rest: list[str] = []
        for i in range(0, len(covered), TXN_DELETES):
            chunk = covered[i:i + TXN_DELETES]
            if any(isinstance(r, Exception) for r in self.retry(delete_all, chunk)):
                rest += chunk
        deleted = len(covered) - len(rest)
        for name in rest:  # another compactor took some of them: the rest one by one
            try:
                self.zk.delete(f"{self.dir}/{name}")
                deleted += 1
            except NoNodeError:
                pass
        return deleted

    def _write_snapshot(self, state: ClusterState) -> None:
        body = state.to_json().encode()
        if len(body) <= PART_BYTES:
            header = json.dumps({"seq": state.seq, "state": json.loads(body)}).encode()
        else:
            parts = [body[i:i + PART_BYTES] for i in range(0, len(body), PART_BYTES)]
            self.retry(self.zk.ensure_path, self.parts_dir)
            for i, part in enumerate(parts):
                path = f"{self.parts_dir}/{state.seq}-{i}"
                try:
                    self.retry(self.zk.create, path, part)
                except NodeExistsError:  # a compactor that died after this part: the same fold, the same bytes
                    self.retry(self.zk.set, path, part)
            header = json.dumps({"seq": state.seq, "parts": len(parts)}).encode()
        if self.zk.exists(self.snapshot_path):
            self.retry(self.zk.set, self.snapshot_path, header)
        else:
            self.retry(self.zk.create, self.snapshot_path, header)
        self._delete_parts_before(state.seq)

    def _delete_parts_before(self, seq: int) -> None:
        try:
            names = self.retry(self.zk.get_children, self.parts_dir)
        except NoNodeError:
            return
        for name in names:
            if int(name.split("-")[0]) < seq:
                try:
                    self.retry(self.zk.delete, f"{self.parts_dir}/{name}")
                except NoNodeError:
                    pass

    # --- reading -------------------------------------------------------------
    def _children(self, listed: list[str] | None = None) -> list[str]:
        """The commands' names in order: of ``listed`` if given, else of a fresh listing."""
        names = self.retry(self.zk.get_children, self.dir) if listed is None else listed
        return sorted(c for c in names if c.startswith(PREFIX))

    def _snapshot_seq(self) -> int:
        try:
            data, _ = self.retry(self.zk.get, self.snapshot_path)
        except NoNodeError:
            return -1
        return int(json.loads(data)["seq"])

    def snapshot(self) -> ClusterState:
        while True:
            try:
                data, _ = self.retry(self.zk.get, self.snapshot_path)
            except NoNodeError:
                return ClusterState()
            header = json.loads(data)
            if "state" in header:
                return ClusterState.from_json(json.dumps(header["state"]))
            try:
                body = b"".join(self.retry(self.zk.get, f"{self.parts_dir}/{header['seq']}-{i}")[0]
                                for i in range(int(header["parts"])))
            except NoNodeError:
                continue  # replaced by a newer snapshot while we read: read the new one
            return ClusterState.from_json(body)

    def znode_sizes(self) -> dict[str, int]:
        """Bytes of every znode this log keeps (the commands, the snapshot and its parts): for tests and
        benchmarks that check the log stays within ZooKeeper's limits and flat over a run."""
        paths = [f"{self.dir}/{n}" for n in self._children()] + [f"{self.parts_dir}/{n}" for n in self._parts()]
        sizes: dict[str, int] = {}
        for path in [*paths, self.snapshot_path]:
            stat = self.retry(self.zk.exists, path)
            if stat is not None:  # None: deleted between the listing and the read
                sizes[path] = stat.dataLength
        return sizes

    def _parts(self) -> list[str]:
        try:
            return list(self.retry(self.zk.get_children, self.parts_dir))
        except NoNodeError:
            return []

    def read_after(self, seq: int, listed: list[str] | None = None) -> list[Command] | None:
        """Commands after ``seq`` in order, or None if some were compacted away (reload the snapshot).
        ``listed``: the log's children as a watch just delivered them (else they are listed here)."""
        names = [n for n in self._children(listed) if int(n[len(PREFIX):]) > seq]
        out: list[Command] = []
        for name in names:
            try:
                data, _ = self.zk.get(f"{self.dir}/{name}")
            except NoNodeError:
                return None
            d = json.loads(data)
            out.append(Command(int(name[len(PREFIX):]), d.pop("k"), d))
        if out and out[0].seq == seq + 1:
            return out  # nothing between seq and the tail was deleted: no compaction passed seq
        if self._snapshot_seq() > seq:
            return None  # a compaction deleted commands after seq (sequence numbers have gaps anyway)
        return out

    def load(self) -> ClusterState:
        """The current state: the snapshot plus the tail after it."""
        while True:
            state = self.snapshot()
            tail = self.read_after(state.seq)
            if tail is not None:
                for cmd in tail:
                    state = apply(state, cmd)
                return state

    def znodes(self) -> int:
        return len(self._children())


class Follower:
    """A reader that keeps its fold current: a children watch wakes it, :meth:`refresh` folds the news."""

    def __init__(self, log: CommandLog, on_change: Callable[[], None] | None = None) -> None:
        self.log = log
        self.state = log.load()
        self.changed = threading.Event()
        self.on_change = on_change
        self._watching = True
        self._listed: list[str] | None = None  # the children the watch delivered last, not yet folded
        self.log.zk.ChildrenWatch(self.log.dir, self._on_children, send_event=False)

    def _on_children(self, children: list[str]) -> bool:
        self._listed = children
        self.changed.set()
        if self.on_change is not None:
            self.on_change()
        return self._watching

    def refresh(self) -> list[tuple[Command, ClusterState]]:
        """Fold commands appended since the last call; returns each with the state *before* it."""
        self.changed.clear()
        self._listed = None
        return self._fold(None)

    def catch_up(self) -> list[tuple[Command, ClusterState]]:
        """:meth:`refresh` as far as the watch's last list reaches (a later append wakes the watch
        again), without listing the log once more; with no list delivered since, a refresh."""
        self.changed.clear()  # first: a list delivered from now on sets it again
        listed, self._listed = self._listed, None
        return self._fold(listed)

    def _fold(self, listed: list[str] | None) -> list[tuple[Command, ClusterState]]:
        tail = self.log.read_after(self.state.seq, listed)
        if tail is None:  # compacted past our position: continue from the snapshot
            snap = self.log.snapshot()
            if snap.seq > self.state.seq:
                self.state = snap
            tail = self.log.read_after(self.state.seq) or []
        applied = []
        for cmd in tail:
            before = self.state
            self.state = apply(before, cmd)
            applied.append((cmd, before))
        return applied

    def stop(self) -> None:
        self._watching = False
