"""Carrying out recovery after a worker loss: lineage, checkpoint rollback, or the choice between them.

**Lineage** (the plan itself is ``lineage.planner``; this is the protocol
around it, in the seed's order):

1. take the PT delete lock exclusively — no worker can drop an object now,
   so everything the snapshot sees as present stays present;
2. read all tables in one transaction; plan (lost stateful channels start
   from their newest committed snapshot, or from a newer one written for a
   checkpoint still under way, or aborted by this very loss, where that is
   safe: ``CheckpointManager.uncommitted``);
3. apply the plan in one script: tasks into survivors' NTTs, inputs
   resurrected, the lost worker's NOT/PT entries dropped, its channels moved,
   the worker fenced off, the recovery epoch advanced;
4. release the lock and wake the survivors.

**Checkpoint** (Feldera's restart from the newest common checkpoint, without
restarting processes): every survivor reopens the newest committed cut
(``open``): buffers are dropped, stateful channels load their snapshots, the
lineage tables start over with the cut's in-flight objects held by checkpoint
storage; ``checkpoint.restore`` plans what brings each channel to the cut's
boundary; the steps after it replay from the step log, and the barrier drops
what it released already.

**Auto**: lineage when nothing stateful was lost, when no checkpoint was
committed yet (a rollback would go back to the very beginning and re-run
every channel, while lineage re-runs only what was lost: stateful consumers
keep their inputs until a checkpoint covers them), or when every lost
stateful channel has a snapshot and every input it consumed since is still
present on a survivor; checkpoint otherwise.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ftpipeline.checkpoint.restore import Cut, plan_restore
from ftpipeline.control.store import RunStore, StepRecord
from ftpipeline.coordinator.trigger import Reason
from ftpipeline.dataflow.graph import Graph
from ftpipeline.lineage.lost import lost_work
from ftpipeline.lineage.naming import Channel, SlotRange, Task, TaskKind, WorkerId
from ftpipeline.lineage.planner import TablesView, plan_recovery
from ftpipeline.lineage.stepclock import StepClock, from_manifest
from ftpipeline.lineage.tables import LineageTables
from ftpipeline.worker.transport import SidecarClient, Unreachable, call_each

log = logging.getLogger("ftpipeline.recovery")


@dataclass
class RecoveryRecord:
    worker: WorkerId
    strategy: str
    epoch: int
    tasks: tuple[tuple[WorkerId, Task], ...]
    moves: dict[Channel, WorkerId]
    detected_at: float
    seconds: float = 0.0
    replaced: tuple[str, ...] = ()
    rebuilt: tuple[Channel, ...] = ()
    lost_objects: int = 0
    buffered_rows: int = 0
    planned_rows: int = 0
    lost_rows: int = 0                   # the work lost with the worker (``lineage/lost.py``)
    boundary: int | None = None          # checkpoint strategy: the cut rolled back to
    placement: dict[Channel, WorkerId] = field(default_factory=dict)
    to_commit_seconds: float | None = None
    replay_to: int = 0                   # checkpoint strategy: the steps after the cut up to this one replay

    def describe(self) -> str:
        """What the recovery did, in one line (the terminal, the Recovered Event): which work it re-runs and
        where, as the plan says, not what the loss looked like."""
        if self.strategy == "evacuation":  # a worker asked to leave (evacuation.py): nothing was lost
            moved, states = len(self.moves), len(self.rebuilt)
            return (f"worker {self.worker}, asked to leave, handed its {moved} channel{'' if moved == 1 else 's'} "
                    f"over in {self.seconds * 1000:.0f} ms ({states} state{'' if states == 1 else 's'} from its "
                    "snapshot), nothing re-run")
        took = f"{self.strategy} recovery of worker {self.worker} in {self.seconds * 1000:.0f} ms"
        n = len({w for w, _ in self.tasks})
        survivors = f"{n} survivor{'' if n == 1 else 's'}"
        lost = f"{self.lost_rows:,} rows of work lost with it"
        if self.strategy == "restart":  # no worker survived: a new set reopened the cut
            cut = f"the checkpoint at step {self.boundary}" if self.boundary else "the very beginning (no checkpoint)"
            return f"{took}: no worker survived; a new set of workers reopened {cut} ({lost})"
        if self.strategy == "checkpoint":
            cut = f"the checkpoint at step {self.boundary}" if self.boundary else "the very beginning (no checkpoint)"
            first = (self.boundary or 0) + 1
            replay = (f", then steps {first}-{self.replay_to} replay on every channel" if self.replay_to >= first
                      else "")
            # every survivor reopens the cut itself; the tasks restore what none of them holds
            reopened = {w for w in self.placement.values() if w != self.worker} or {w for w, _ in self.tasks}
            k, t = len(reopened), len(self.tasks)
            restore = f" with {t} restore task{'' if t == 1 else 's'}" if t else ""
            return (f"{took}: rolled back to {cut}, reopened on {k} survivor{'' if k == 1 else 's'}{restore}"
                    f"{replay} ({lost})")
        rebuilt = ", ".join(c.key() for c in self.rebuilt) or "none"
        return (f"{took}: {len(self.tasks)} tasks re-run on {survivors}, about {self.planned_rows:,} rows "
                f"read again ({lost}); stateful channels rebuilt: {rebuilt}")

    def summary(self) -> dict[str, Any]:
        return {
            "worker": self.worker,
            "epoch": self.epoch,
            "strategy": self.strategy,
            "tasks": len(self.tasks),
            "rebuilt": [c.key() for c in self.rebuilt],
            "moved": {c.key(): w for c, w in self.moves.items()},
            "lost_objects": self.lost_objects,
            "buffered_rows": self.buffered_rows,
            "planned_rows": self.planned_rows,
            "lost_rows": self.lost_rows,
            "boundary": self.boundary,
            "seconds": round(self.seconds, 4),
        }


def snapshots_of(manifest: Mapping[str, Any] | None) -> dict[Channel, tuple[int, str]]:
    if not manifest:
        return {}
    return {Channel.parse(c): (int(s["step"]), str(s["path"])) for c, s in manifest["states"].items()}


def lost_of(graph: Graph, view: TablesView, dead: WorkerId, manifest: Mapping[str, Any] | None) -> int:
    """The work lost with ``dead`` since the cut of ``manifest`` (``lineage/lost.py``)."""
    snapshots = {ch: step for ch, (step, _) in snapshots_of(manifest).items()}
    return lost_work(graph, view, dead, int(manifest["boundary"]) if manifest else 0, snapshots)


def choose_strategy(strategy: str, graph: Graph, view: TablesView, dead: WorkerId,
                    manifest: Mapping[str, Any] | None) -> str:
    if strategy != "auto":
        return strategy
    lost = [ch for ch, w in view.placement.items() if w == dead and graph.is_stateful(ch.stage)]
    if not lost or not manifest:  # no checkpoint: a rollback re-runs everything, lineage only what was lost
        return "lineage"
    snaps = snapshots_of(manifest)
    for ch in lost:
        if ch not in snaps:
            return "checkpoint"
        kept = Task(TaskKind.REBUILD, ch.stage, ch.index, step=view.state_steps.get(ch, 0), first=snaps[ch][0] + 1)
        if any(view.pt.get(o.key()) in (None, dead) for o in graph.inputs_of(kept)):
            return "checkpoint"
    return "lineage"


def wake(clients: Mapping[WorkerId, SidecarClient]) -> None:
    for worker, answer in call_each(clients, "wake", timeout_s=2).items():
        if isinstance(answer, Exception):  # a survivor dying now is the next failure; the backend reports it
            log.warning("wake failed", extra={"worker": worker, "error": str(answer)})


def recover_lineage(
    graph: Graph,
    tables: LineageTables,
    view: TablesView,
    dead: WorkerId,
    survivors: list[WorkerId],
    epoch: int,
    manifest: Mapping[str, Any] | None,
    clients: Mapping[WorkerId, SidecarClient],
    started: float,
    clock: Callable[[], float],
    newer: Mapping[Channel, tuple[int, str]] | None = None,
) -> RecoveryRecord:
    """Plan on ``view`` (taken under the exclusive lock, which the caller holds) and apply; ``newer``: the
    snapshots of a checkpoint not committed, closer bases for a lost channel's rebuild (``lineage/planner.py``)."""
    plan = plan_recovery(graph, view, dead, survivors, epoch, snapshots_of(manifest), newer)
    tables.apply(plan)
    return RecoveryRecord(
        worker=dead, strategy="lineage", epoch=epoch, tasks=plan.tasks, moves=plan.moves, detected_at=started,
        replaced=plan.replaced, rebuilt=plan.rebuilt, lost_objects=len(plan.lost), buffered_rows=plan.buffered_rows,
        planned_rows=plan.planned_rows, placement=dict(plan.placement),
    )


def rollback(
    graph: Graph,
    tables: LineageTables,
    store: RunStore,
    view: TablesView,
    dead: WorkerId | None,
    placement: dict[Channel, WorkerId],
    moves: dict[Channel, WorkerId],
    survivors: list[WorkerId],
    epoch: int,
    manifest: Mapping[str, Any] | None,
    gt_last: int,
    clients: Mapping[WorkerId, SidecarClient],
    started: float,
    clock: Callable[[], float],
    open_timeout_s: float = 120.0,
    answer_timeout_s: float = 6.0,
) -> RecoveryRecord:
    """Every survivor reopens ``manifest`` (None: the beginning); plan the way back to its cut. Each call
    waits ``answer_timeout_s`` (the heartbeat timeout): the call is an acknowledgement, the reopening itself is
    watched for ``open_timeout_s``, and a survivor on a node lost with the dead one never answers."""
    boundary = int(manifest["boundary"]) if manifest else 0
    inflight = {k: int(v) for k, v in (manifest["inflight"] if manifest else {}).items()}
    tables.set_placement(moves)
    tables.reset_for_restore(survivors, inflight, epoch)
    # a survivor that does not answer is the next loss, not this recovery's failure: the backend or its
    # heartbeat reports it, and that recovery plans its tasks again
    answering = dict(clients)
    for worker, answer in call_each(clients, "open", {"manifest": manifest}, timeout_s=answer_timeout_s).items():
        if isinstance(answer, Unreachable):
            log.warning("open failed: the worker does not answer", extra={"worker": worker, "error": str(answer)})
            answering.pop(worker)
        elif isinstance(answer, Exception):
            raise answer
    deadline = time.monotonic() + open_timeout_s
    for worker, client in answering.items():
        try:
            while client.call("state", timeout_s=answer_timeout_s)["state"] == "opening":
                if time.monotonic() > deadline:
                    raise TimeoutError(f"worker {worker} did not reopen checkpoint at step {boundary}")
                time.sleep(0.02)
        except Unreachable as exc:
            log.warning("reopening: the worker stopped answering", extra={"worker": worker, "error": str(exc)})
    states = {Channel.parse(c): int(s["step"]) for c, s in (manifest["states"] if manifest else {}).items()}
    for ch in (c for c in graph.channels() if graph.is_stateful(c.stage)):
        states.setdefault(ch, 0)
    recorded = {int(s): {Channel.parse(c): (o[0], o[1]) for c, o in offs.items()}
                for s, offs in (manifest.get("steps", {}) if manifest else {}).items()}
    clocks = from_manifest(manifest)
    for step, offsets in sorted(recorded.items()):
        # the step log keeps what the cut recorded, so the next checkpoint's manifest can record it too
        # (a run resumed on a fresh Redis and command log knows nothing of the steps before its cut)
        if store.step(step) is None:
            store.record_step(StepRecord(step, offsets, Reason.REPLAY.value, clocks.get(step, StepClock())))

    def ranges_of(ch: Channel, step: int) -> tuple[SlotRange, ...]:
        if step in recorded:
            return graph.ranges(recorded[step], ch.stage, ch.index)
        record = store.step(step)
        if record is None:
            raise RuntimeError(f"step {step} is neither in the checkpoint nor in the step log")
        return graph.ranges(record.offsets, ch.stage, ch.index)

    cut = Cut(boundary=boundary, states=states, gt_last=gt_last, inflight=frozenset(inflight))
    tasks = plan_restore(graph, cut, graph.task_kind, ranges_of, epoch)
    assigned = tuple((placement[t.ref], t) for t in tasks)
    tables.assign(assigned)
    wake(clients)
    lost = view.not_.get(dead, frozenset()) if dead else frozenset()
    return RecoveryRecord(
        worker=dead or WorkerId(""), strategy="checkpoint", epoch=epoch, tasks=assigned, moves=moves,
        detected_at=started, lost_objects=len(lost), buffered_rows=sum(view.rows.get(n, 0) for n in lost),
        planned_rows=sum(view.rows.get(n, 0) for n in inflight), boundary=boundary, placement=dict(placement),
        seconds=clock() - started,
    )
