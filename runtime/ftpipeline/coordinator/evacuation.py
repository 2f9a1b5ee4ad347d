"""A worker asked to leave (a drain evicts its pod) hands its channels over: no recovery, no replay.

Flink and Spark restart the job when a node is drained. Here the worker's
sidecar, on SIGTERM, asks the coordinator for a handover
(``worker/leaving.py``), and the eviction costs one snapshot of the
leaver's states and the survivors loading them:

    (none) --'leaving' from a member--> REQUESTED: no new step goes out
    REQUESTED --every step triggered has committed, no checkpoint under way-->
              SNAPSHOT: the leaver snapshots its states as a fresh epoch of checkpoint
              storage (only its channels; the epoch is never committed as a checkpoint)
    SNAPSHOT --its snapshots ('checkpointed' of that epoch)--> HANDED OVER: under the lineage
              tables' lock, with an 'evacuation' command first in the log, the lineage plan with
              those snapshots moves its channels to the survivors; each stateful one is rebuilt from
              its snapshot with nothing to fold (the snapshot is at the channel's last step), so no
              task re-runs. The leaver is fenced and killed; a replacement starts after the next
              commit, not charged to the restart budget (a drain is planned); the next checkpoint
              settles the message counts first (the leaver's went with it); steps go on
    SNAPSHOT --its snapshot failed, or none within SNAPSHOT_TIMEOUT_S, or no lineage plan--> the leaver
              is killed: an ordinary loss, recovered as one
    (none) --'leaving' from a non-member, or from the last worker--> it is killed: a loss
    any --the leaver is lost meanwhile--> dropped here; the loss is recovered as any other
    SNAPSHOT --another worker recovered meanwhile--> REQUESTED (its channels may have moved)

One evacuation at a time (a PodDisruptionBudget of one lets a drain evict
one worker at a time anyway); others wait in order.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ftpipeline.coordinator.journal import Journal
from ftpipeline.coordinator.recovery import RecoveryRecord, recover_lineage, wake
from ftpipeline.dataflow.graph import Graph
from ftpipeline.lineage.naming import WorkerId
from ftpipeline.lineage.tables import LineageTables
from ftpipeline.worker.transport import SidecarClient

log = logging.getLogger("ftpipeline.coordinator")

# A snapshot not reported within this long (lost report, a hung Spark process) ends the handover: the leaver is
# killed and recovered as a loss, so steps are never held for good.
SNAPSHOT_TIMEOUT_S = 60.0


class Stage(enum.Enum):
    REQUESTED = "requested"
    SNAPSHOT = "snapshot"


@dataclass
class Evacuation:
    worker: WorkerId
    stage: Stage = Stage.REQUESTED
    epoch: int = 0                      # the snapshot's epoch in checkpoint storage
    asked_at: float = 0.0               # when the snapshot was asked


class Evacuations:
    """The evacuation protocol's own state: the current one and those waiting."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.current: Evacuation | None = None
        self.waiting: list[Evacuation] = []
        self.done: list[RecoveryRecord] = []   # each handover, for the run's result

    @property
    def holds_steps(self) -> bool:
        """No new step while a worker is leaving: its states are snapshot between steps."""
        return self.current is not None

    def request(self, worker: WorkerId, members: list[WorkerId]) -> bool:
        """False: no handover for ``worker`` (not a member, or none would be left to take its channels); the
        coordinator lets it go as a loss."""
        known = [e.worker for e in ([self.current] if self.current else []) + self.waiting]
        if worker in known:
            return True
        if worker not in members or len(members) - len(known) <= 1:
            log.warning("asked to leave, but no handover is possible: it goes as a loss", extra={"worker": worker})
            return False
        log.info("worker asked to leave: holding new steps for its handover", extra={"worker": worker})
        self.waiting.append(Evacuation(worker))
        return True

    def forget(self, worker: WorkerId) -> None:
        """``worker`` was lost before its handover: recovery takes over."""
        if self.current is not None and self.current.worker == worker:
            log.warning("a leaving worker was lost before its handover", extra={"worker": worker})
            self.current = None
        self.waiting = [e for e in self.waiting if e.worker != worker]

    def interrupted(self) -> None:
        """Another worker was recovered (or the run rolled back): channels may have moved onto the leaver since its
        snapshot, so the snapshot is asked again once the steps settle; a report of the old one is ignored."""
        if self.current is not None and self.current.stage is Stage.SNAPSHOT:
            self.current.stage = Stage.REQUESTED

    def start(self, settled: bool, busy: bool, allocate: Callable[[], int],
              ask: Callable[[WorkerId, int], None]) -> WorkerId | None:
        """REQUESTED -> SNAPSHOT once the steps in flight committed (``settled``) and no checkpoint is under
        way (``busy``): a fresh epoch from ``allocate``, asked of the leaver through ``ask``. Returns a leaver
        whose snapshot did not come within SNAPSHOT_TIMEOUT_S (dropped here): the coordinator kills it."""
        if self.current is None and self.waiting:
            self.current = self.waiting.pop(0)
        cur = self.current
        if cur is not None and cur.stage is Stage.SNAPSHOT and self.clock() - cur.asked_at > SNAPSHOT_TIMEOUT_S:
            log.error("no handover snapshot in time: the leaving worker goes as a loss",
                      extra={"worker": cur.worker, "epoch": cur.epoch, "waited_s": SNAPSHOT_TIMEOUT_S})
            self.current = None
            return cur.worker
        if cur is None or cur.stage is not Stage.REQUESTED or not settled or busy:
            return None
        cur.epoch, cur.stage, cur.asked_at = allocate(), Stage.SNAPSHOT, self.clock()
        log.info("handover snapshot asked", extra={"worker": cur.worker, "epoch": cur.epoch})
        ask(cur.worker, cur.epoch)
        return None

    def snapshot_of(self, event: Mapping[str, Any]) -> Evacuation | None:
        """The evacuation whose snapshot ``event`` reports ('checkpointed' or 'checkpoint_failed'), or None."""
        cur = self.current
        if cur is None or cur.stage is not Stage.SNAPSHOT or int(event.get("epoch", -1)) != cur.epoch:
            return None
        if event.get("w") != cur.worker:
            return None
        self.current = None
        return cur


def handover_manifest(last: Mapping[str, Any] | None, snapshots: list[Mapping[str, Any]]) -> dict[str, Any]:
    """The snapshots the lineage plan starts moved channels from: the leaver's fresh ones over the newest
    committed checkpoint's (which the other channels keep)."""
    states = dict((last or {}).get("states", {}))
    for snap in snapshots:
        states[str(snap["channel"])] = {"step": int(snap["step"]), "path": str(snap["path"])}
    return {"states": states}


def plan_handover(graph: Graph, tables: LineageTables, journal: Journal, owner: str, survivors: list[WorkerId],
                  clients: Mapping[WorkerId, SidecarClient], last: Mapping[str, Any] | None, leaver: WorkerId,
                  snapshots: list[Mapping[str, Any]], started: float, clock: Callable[[], float]) -> RecoveryRecord:
    """Move ``leaver``'s channels to ``survivors`` from its snapshots, under the lineage tables' lock (held by
    ``owner``), the decision in the command log first."""
    epoch = journal.next_epoch()
    tables.lock_exclusive(owner)
    try:
        view = tables.snapshot([*survivors, leaver])
        # a stateful channel that has folded only empty inputs holds no state to snapshot: empty at its step
        taken = {str(s["channel"]) for s in snapshots}
        empty = [{"channel": ch.key(), "step": view.state_steps.get(ch, 0), "path": ""}
                 for ch, w in view.placement.items()
                 if w == leaver and graph.is_stateful(ch.stage) and ch.key() not in taken]
        manifest = handover_manifest(last, [*snapshots, *empty])
        journal.append("evacuation", epoch=epoch, worker=leaver)  # write-ahead
        record = recover_lineage(graph, tables, view, leaver, survivors, epoch, manifest, clients, started, clock)
    finally:
        tables.unlock_exclusive(owner)
    wake(clients)
    record.strategy = "evacuation"
    record.seconds = clock() - started
    return record
