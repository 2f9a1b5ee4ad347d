"""The coordinator's side of the command log: write each decision first, follow what peers report.

The log itself (``commandlog/``) knows nothing of steps or recovery; this is
where the coordinator's decisions become commands and where the ring's
reports become lost workers:

    OPEN    --open(resume, kept)--> the log claimed (fencing every older coordinator), then
                              run-started (a new run epoch; the peers of the workers taken over stay
                              in the ring; on a resume the steps after the resume point get back
                              the offsets they were started with)
    any decision --append--> a command, before the decision is acted on; refused once another
                              coordinator claimed the log: Superseded, and this one stops
    a step's start, a step's commit --append_ahead--> sent without waiting: a start while the
                              step's tasks run, a commit while the next step's tasks go out
    sends in flight --settle--> each one's acceptance awaited in order (ZooKeeper applies one
                              session's requests in the order sent); from the first that failed on,
                              appended again the waiting way. Run before any other command, and
                              before a committed step's output is released; the log's order is
                              the order of the calls
    a ring member's 'leave' --deaths()--> a worker the coordinator must treat as lost
    every ``compact_every`` commands --> the fold written as a snapshot, the covered commands deleted

While ZooKeeper is out of reach every call waits in ``outages.py`` (the run
is paused, never failed). Without ZooKeeper (fault tolerance off) every
method is a no-op.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

from kazoo.handlers.threading import KazooTimeoutError

from ftpipeline.commandlog.zkclient import UNREACHABLE
from ftpipeline.commandlog.zklog import CommandLog, Deposed, Follower
from ftpipeline.control.store import RunStore, StepRecord
from ftpipeline.coordinator.errors import Interrupted, Superseded
from ftpipeline.coordinator.faults import CrashPoint
from ftpipeline.coordinator.outages import ControlPlane
from ftpipeline.coordinator.trigger import Reason
from ftpipeline.lineage.naming import Channel, WorkerId
from ftpipeline.lineage.stepclock import StepClock
from ftpipeline.lineage.tables import LineageTables
from ftpipeline.obs.metrics import RunMetrics

log = logging.getLogger("ftpipeline.coordinator")
T = TypeVar("T")
SETTLE_TIMEOUT_S = 30.0  # then the append is redone through the outage handling, which waits as long as it takes
WAIT_SLICE_S = 0.5       # how often a wait for a send looks for a stop request


class Journal:
    def __init__(self, commands: CommandLog | None, tables: LineageTables, store: RunStore, metrics: RunMetrics,
                 pipeline: str, compact_every: int = 50, control: ControlPlane | None = None) -> None:
        self.commands = commands
        self.control = control
        self.tables = tables
        self.store = store
        self.metrics = metrics
        self.pipeline = pipeline
        self.compact_every = compact_every
        self.follower: Follower | None = None
        self.owner = f"{socket.gethostname()}/{os.getpid()}/{uuid.uuid4().hex[:8]}"  # named in the claim
        self.run_epoch = 0  # this run's, once open() wrote it (0: no command log)
        self.log_znodes_max = 0
        self._appended = 0
        self._crash = CrashPoint.from_env()
        self._ahead: list[tuple[str, dict[str, Any], Any]] = []  # sent in this order, not yet known accepted

    def _zk(self, fn: Callable[[], T], what: str) -> T:
        """``fn`` against ZooKeeper; while it is out of reach the run waits here (``outages.py``)."""
        if self.control is None:
            return fn()
        return self.control.call("zookeeper", fn, UNREACHABLE, what)

    def append(self, kind: str, **body: Any) -> None:
        if self.commands is not None:
            self.settle()
            commands = self.commands
            try:
                self._zk(lambda: commands.append(kind, **body), f"appending {kind}")
            except Deposed as exc:
                raise self._superseded(exc) from None
            self._appended_one(kind)

    def _superseded(self, exc: Deposed) -> Superseded:
        self._ahead = []
        log.warning("another coordinator claimed the command log: stopping", extra={"error": str(exc)})
        return Superseded(str(exc))

    def append_ahead(self, kind: str, **body: Any) -> None:
        """Send ``kind`` and go on; :meth:`settle` makes sure it landed, and in order.

        For a step's start: its offsets are in Redis's step log before its tasks run, and a step
        commits only after its start is in this log. For a step's commit: its output is released
        only after :meth:`settle`, so the next step's tasks go out while ZooKeeper writes it.
        Waiting for each write instead held every step back by two fsyncs of ZooKeeper's log."""
        if self.commands is not None:
            if any(sent is None for _, _, sent in self._ahead):  # an earlier one could not be sent
                self._ahead.append((kind, body, None))
                return
            try:
                self._ahead.append((kind, body, self.commands.append_async(kind, **body)))
            except Exception as exc:  # the client would not even queue it: settle appends it
                log.warning("command not sent ahead", extra={"kind": kind, "error": repr(exc)})
                self._ahead.append((kind, body, None))

    def settle(self) -> None:
        """Wait until every command sent ahead is accepted, in the order sent. From the first whose
        send failed (ZooKeeper out of reach) on, append them again the waiting way (``outages.py``).

        ZooKeeper applies a session's requests in the order sent, but a lost connection fails the
        ones on the wire while kazoo holds the ones not yet sent and sends them after it reconnects.
        So after a lost connection the log may hold a command twice, or a step's start before the
        previous step's commit; the fold takes both (``commandlog/state.py``): a start repeated with
        the same offsets changes nothing, a commit out of order is ignored and the one appended again
        counts, a repeated commit is only counted. The output is released after this returns, so
        never on a commit that is not in the log."""
        ahead, self._ahead = self._ahead, []
        for i, (kind, body, sent) in enumerate(ahead):
            try:
                if sent is None:
                    raise RuntimeError("not sent")
                self._wait(sent)
            except Interrupted:
                raise
            except Deposed as exc:
                raise self._superseded(exc) from None
            except Exception as exc:
                log.warning("command sent ahead not accepted: appending it again",
                            extra={"kind": kind, "error": repr(exc)})
                for again_kind, again_body, _ in ahead[i:]:
                    self.append(again_kind, **again_body)
                return
            self._appended_one(kind)

    def _wait(self, sent: Any) -> None:
        """``sent``'s outcome, within ``SETTLE_TIMEOUT_S`` of ZooKeeper being connected: while it is
        out of reach kazoo holds the request until the session is back (or fails it when the session
        expires), so the wait goes on, as a waiting append would; a stop request is honoured meanwhile."""
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        while True:
            try:
                sent.get(timeout=WAIT_SLICE_S)
                return
            except KazooTimeoutError:
                if self.control is not None:
                    self.control.check_stop()
                    if not self.control.available("zookeeper"):
                        deadline = time.monotonic() + SETTLE_TIMEOUT_S  # counted again once it is back
                        continue
                if time.monotonic() >= deadline:
                    raise

    @property
    def unsettled(self) -> int:
        return len(self._ahead)

    def _appended_one(self, kind: str) -> None:
        self._appended += 1
        self.metrics.log_commands.labels(self.pipeline, kind).inc()
        if self._crash is not None:
            self._crash.after(kind)

    def next_epoch(self) -> int:
        logged = self.follower.state.epoch if self.follower is not None else 0
        return max(self.tables.epoch(), logged) + 1

    def open(self, resume: bool, kept: list[WorkerId] | None = None) -> None:
        """Start (or continue) the run in the command log: a new run epoch, and on a resume the offsets
        of the steps after the resume point from the log, so they re-run exactly as they were started
        (the step log in Redis may be gone: a private Redis keeps nothing). The ring's peers of the
        ``kept`` workers (taken over, still running) stay members; every other peer stops."""
        if self.commands is None:
            return
        commands = self.commands
        self._zk(lambda: commands.claim(self.owner), "claiming the command log")
        self.follower = Follower(commands)
        before = self.follower.state
        epoch = max(before.epoch, self.tables.epoch()) + (1 if resume else 0)
        self.run_epoch = before.run_epoch + 1
        peers = sorted(p for p, w in before.members.items() if w in (kept or ()))
        self.append("run-started", run_epoch=self.run_epoch, epoch=epoch, fresh=not resume, kept=peers)
        if resume:
            self.restore_step_log()
        self.follower.refresh()
        log.info("command log opened", extra={"run_epoch": before.run_epoch + 1, "epoch": epoch,
                                              "committed": before.committed, "seq": self.follower.state.seq})

    def restore_step_log(self) -> None:
        """Put the offsets the log recorded for every step after its resume point back into Redis's step
        log (a private Redis keeps nothing; one that restarted empty lost it)."""
        if self.follower is None:
            return
        clocks = self.follower.state.clocks
        for step, offsets in sorted(self.follower.state.started.items()):
            recorded = self.store.step(step)
            logged = {Channel.parse(c): (lo, hi) for c, (lo, hi) in offsets.items()}
            clock = clocks.get(step, StepClock())
            if recorded is None or recorded.offsets != logged or recorded.clock != clock:
                self.store.record_step(StepRecord(step, logged, Reason.REPLAY.value, clock))

    def close_ring_around(self, dead: WorkerId, reason: str) -> None:
        """The coordinator saw ``dead`` go (process exit, pod deleted): close the ring around it now
        rather than after its session times out."""
        if self.follower is None or reason == "heartbeat expired":
            return
        peer = self.follower.state.peer_of(dead)
        if peer is not None:
            self.append("leave", peer=peer, worker=dead, by="coordinator", reason=reason or "gone")

    def deaths(self) -> list[tuple[WorkerId, str, str]]:
        """Workers a ring member reported dead since the last call: (worker, by whom, why)."""
        out: list[tuple[WorkerId, str, str]] = []
        follower = self.follower
        if follower is None or not follower.changed.is_set():
            return out
        for cmd, before in self._zk(follower.catch_up, "reading the command log"):
            if cmd.kind != "leave" or cmd.get("by") == "coordinator":
                continue
            worker = WorkerId(str(before.members.get(str(cmd.get("peer"))) or ""))
            out.append((worker, str(cmd.get("by")), str(cmd.get("reason"))))
        return out

    def maybe_compact(self) -> None:
        if self.commands is None or self.follower is None or self._appended < self.compact_every:
            return
        self._appended = 0
        follower, commands = self.follower, self.commands
        self._zk(follower.refresh, "reading the command log")
        znodes = self._zk(commands.znodes, "counting the command log")
        self.log_znodes_max = max(self.log_znodes_max, znodes)
        self.metrics.log_znodes.set(znodes)
        self._zk(lambda: commands.compact(follower.state), "compacting the command log")
