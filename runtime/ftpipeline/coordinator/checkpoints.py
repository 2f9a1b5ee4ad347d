"""The coordinator's side of checkpoints: when to start one, when it is done, what commit does.

A checkpoint starts at a *boundary* step ``b``: the coordinator increments the
checkpoint epoch to ``e`` (its component of the vector clock), tells every
worker (Feldera's ``checkpoint()`` call), and the source tasks of steps
``b+1`` onward carry ``e``. Workers checkpoint as the new epoch reaches them
(``worker/epochs.py``); the tracker (``checkpoint/tracker.py``) says when the
cut is complete. Commit then

1. writes the manifest into ZooKeeper and moves ``latest``, atomically
   (``checkpoint/pointer.py``) — from here on it is the resume point;
2. has a worker write the manifest next to the snapshots (``checkpoints()``
   lists these) and delete the checkpoints no longer retained. The
   coordinator never opens checkpoint storage itself: in the operator it runs
   far from the pipeline's volumes, which only the pipeline's own pods mount;
3. buries, for each stateful channel, its inputs up to the step its snapshot
   reflects: one interval per edge (GC may now delete them; buffered bytes
   stay bounded by the checkpoint interval);
4. forgets lineage and step-log entries no plan can need any more;
5. prunes what retention no longer keeps: all but the newest ``retain``
   committed checkpoints, and of those the ones older than ``maxAgeSeconds``
   (never the newest), unless pinned — a checkpoint someone asked for by
   name (the operator's ``FTPipelineCheckpoint``) stays until its resource
   is deleted.

The step log is kept back to the oldest of the newest ``retain``
checkpoints, not only the newest: restoring an older one replays the steps
after it with the offsets they were first read with, so the sinks' barrier
drops exactly what was released (a Kafka source could not plan them again
alike). A pinned checkpoint older than that does not hold the step log; a
restore from it would re-plan those steps, which ``losses._check_replayable``
refuses for a Kafka source.

The commit itself is one ZooKeeper transaction: if ZooKeeper is out of reach
then, the checkpoint is aborted and the next one starts normally. The reads
and deletes around it (which epochs exist, pruning) wait through an outage
like every other coordinator call (``outages.py``) rather than fail the run.

A worker that does not answer the ``checkpoint`` call (it died a moment
ago; the cluster backend or its heartbeat will say so) aborts the
checkpoint, as its loss would: the cut could never complete without it. So
does a worker that could not write its snapshot or an in-flight message
(storage gone, full or read-only): it says so (``checkpoint_failed``, with
the error naming the path), the checkpoint is aborted, and the next one
starts when the next one is due. Every abort is logged, counted
(``outcome="aborted"``) and handed to ``on_aborted`` (the operator's Event
and condition).

Scheduling: once ``intervalSteps`` steps passed since the last committed
checkpoint's boundary, or once ``intervalMs`` passed
(then the next step is triggered for the checkpoint's sake if nothing else
would trigger it), or on request. Never two at once; never while a worker
loss is unsettled: after a loss the pipeline is drained and every worker
told to settle its counts before the next epoch begins.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

from kazoo.exceptions import KazooException

from ftpipeline.checkpoint.pointer import CheckpointPointer, CommitFailed
from ftpipeline.checkpoint.tracker import ChannelSnapshot, CheckpointState, CheckpointTracker
from ftpipeline.commandlog.zkclient import UNREACHABLE
from ftpipeline.control.store import RunStore
from ftpipeline.coordinator.members import Members
from ftpipeline.coordinator.outages import ControlPlane
from ftpipeline.dataflow.graph import Graph
from ftpipeline.lineage.naming import Channel, EdgeKey, WorkerId
from ftpipeline.lineage.tables import LineageTables
from ftpipeline.obs.metrics import RunMetrics
from ftpipeline.spec.model import PipelineSpec
from ftpipeline.worker.transport import Unreachable

log = logging.getLogger("ftpipeline.checkpoints")
T = TypeVar("T")


class CheckpointManager:
    def __init__(
        self,
        spec: PipelineSpec,
        graph: Graph,
        store: RunStore,
        tables: LineageTables,
        pointer: CheckpointPointer | None,
        metrics: RunMetrics,
        clock: Callable[[], float],
        members: Members,
        control: ControlPlane | None = None,
    ) -> None:
        self.spec = spec
        self.graph = graph
        self.store = store
        self.tables = tables
        self.pointer = pointer
        self.members = members
        self.control = control
        self.metrics = metrics
        self.clock = clock
        self.epoch = 0                        # the epoch messages carry now (the coordinator's clock component)
        self.allocated = 0                    # newest epoch number ever used (on disk too): never reused
        self.stored: set[int] = set()         # committed epochs found in storage at a resume (retention counts them)
        self.current: CheckpointTracker | None = None
        self.last: dict[str, Any] | None = None   # newest committed manifest
        # snapshots reported for a checkpoint not committed (yet, or ever): each written whole, and kept in
        # storage until the next commit prunes; a lost channel's rebuild may start from one (lineage/planner.py)
        self.uncommitted: dict[Channel, tuple[int, str]] = {}
        self.last_committed_at: float | None = None
        self.last_started_at = clock()
        self.requested = False
        self.needs_settle = False
        self.idle: set[int] = set()           # steps that carried nothing but a barrier (``idle_step``)
        self.history: list[dict[str, Any]] = []
        self.pinned: Callable[[], set[int]] = set  # epochs retention must keep (asked for by name)
        self.known: dict[int, tuple[int, float]] = {}  # committed epoch -> (boundary, commit time): read once
        self.wall: Callable[[], float] = time.time  # commit times in manifests (retention by age)
        self.discard_newer = False  # a resume from a named checkpoint deletes the later ones (the operator's restore)
        self.before_commit: Callable[[], None] | None = None  # fault injection (e.g. expire the session)
        self.tally_at: Callable[[int], dict[str, int]] = lambda boundary: {}  # the run's counts up to a boundary
        self.event_time_at: Callable[[int], dict[str, Any]] = lambda boundary: {}  # the watermark's cut (eventtime/)
        self.on_aborted: Callable[[int, str], None] = lambda epoch, reason: None

    # --- when --------------------------------------------------------------
    @property
    def busy(self) -> bool:
        return self.current is not None and self.current.state in (CheckpointState.COLLECTING, CheckpointState.COMPLETE)

    def due(self, boundary: int) -> bool:
        """Should a checkpoint start at ``boundary`` (before step boundary+1 is triggered)?"""
        if self.busy or boundary <= 0 or self.pointer is None:
            return False
        if self.requested:
            return True
        every = self.spec.checkpoint_steps
        since = self.last["boundary"] if self.last is not None else 0
        self.idle = {s for s in self.idle if s > since}
        worked = boundary - since - sum(1 for s in self.idle if s <= boundary)
        if every and worked >= every:
            return True  # a boundary that fell while the previous one was busy defers it, never skips it
        ms = self.spec.checkpoint_ms
        return bool(ms) and worked > 0 and (self.clock() - self.last_started_at) * 1000 >= ms

    def idle_step(self, step: int) -> None:
        """``step`` runs only to carry a checkpoint's barrier, with no record and the same watermark: it is not
        counted towards the next checkpoint, which would otherwise make another such step, and so on."""
        self.idle.add(step)

    def timer_expired(self) -> bool:
        ms = self.spec.checkpoint_ms
        return bool(ms) and not self.busy and (self.clock() - self.last_started_at) * 1000 >= ms

    # --- start, progress, end ----------------------------------------------
    def restored(self, epoch: int) -> None:
        """Every worker reopened the checkpoint of ``epoch``: messages carry it again."""
        self.epoch = epoch
        self.uncommitted = {}  # snapshots of the history rolled back: a rebuild starts from the cut
        self.allocated = max([self.allocated, epoch, *self._committed_epochs()])

    def found_in_storage(self, epochs: set[int]) -> None:
        """A resume found these committed checkpoints in storage. A run resumed with a command log that
        never knew them (``--from-checkpoint`` on a fresh ZooKeeper) numbers its own checkpoints after
        them, so none is overwritten, and keeps them as long as retention would."""
        self.stored |= epochs
        self.allocated = max([self.allocated, *epochs])

    def _zk(self, fn: Callable[[], T], what: str) -> T:
        """``fn`` against ZooKeeper; while it is out of reach the run waits here (``outages.py``)."""
        return fn() if self.control is None else self.control.call("zookeeper", fn, UNREACHABLE, what)

    def _committed_epochs(self) -> list[int]:
        pointer = self.pointer
        known = set(self._zk(pointer.epochs, "listing committed checkpoints")) if pointer is not None else set()
        return sorted(known | self.stored)

    def start(self, boundary: int) -> None:
        """Begin a checkpoint at ``boundary`` and tell every worker (Feldera's ``checkpoint()``)."""
        settle = self.needs_settle
        epoch = self.begin(boundary, self.members.workers)
        answers = self.members.call_all(self.members.workers, "checkpoint", {"epoch": epoch, "settle": settle})
        for w, answer in answers.items():
            if isinstance(answer, Unreachable):  # dying right now: its loss is detected next; this cut cannot complete
                log.warning("checkpoint call failed: the worker does not answer", extra={"worker": w, "error": str(answer)})
                self.abort(f"worker {w} did not answer the checkpoint call")
                return
            if isinstance(answer, Exception):
                raise answer
        self.needs_settle = False

    def allocate_epoch(self) -> int:
        """A number for snapshots that are not a checkpoint (a handover's, ``evacuation.py``): never reused,
        never committed; the epoch messages carry is unchanged."""
        self.allocated = max(self.allocated, self.epoch) + 1
        return self.allocated

    def begin(self, boundary: int, workers: list[WorkerId]) -> int:
        self.epoch = self.allocate_epoch()
        self.requested = False
        self.last_started_at = self.clock()
        self.current = CheckpointTracker(self.epoch, boundary, frozenset(workers), self.clock())
        log.info("checkpoint started", extra={"epoch": self.epoch, "boundary": boundary, "settle": self.needs_settle})
        return self.epoch

    def on_event(self, event: dict[str, Any]) -> None:
        cur = self.current
        if cur is None or int(event.get("epoch", -1)) != cur.epoch:
            return
        if event["t"] == "checkpointed":
            snapshots = [ChannelSnapshot(**s) for s in event["snapshots"]]
            cur.worker_checkpointed(event["w"], int(event["deficit"]), snapshots)
            self.uncommitted.update({Channel.parse(s.channel): (s.step, s.path) for s in snapshots if s.path})
        elif event["t"] == "inflight":
            cur.received_inflight({k: int(v) for k, v in event["objects"].items()})
            self.metrics.inflight.inc(len(event["objects"]))
        elif event["t"] == "checkpoint_failed":
            self.abort(f"worker {event['w']} could not write to checkpoint storage: {event['error']}")

    def released(self, step: int) -> None:
        if self.current is not None:
            self.current.boundary_released(step)

    def abort(self, reason: str) -> None:
        if self.busy:
            assert self.current is not None
            self.current.abort(reason)
            self.metrics.checkpoints.labels(self.spec.metrics_label, "aborted").inc()
            log.warning("checkpoint aborted", extra={"epoch": self.current.epoch, "reason": reason})
            self.on_aborted(self.current.epoch, reason)
        self.needs_settle = True

    def try_commit(self, committed: int) -> dict[str, Any] | None:
        """Commit the current checkpoint if it is complete; return its manifest."""
        cur = self.current
        if cur is None or cur.state is not CheckpointState.COMPLETE or self.pointer is None:
            return None
        # every worker reported: a stateful channel without a snapshot has folded nothing yet
        for ch in self.graph.channels():
            if self.graph.is_stateful(ch.stage) and ch.key() not in cur.snapshots:
                cur.snapshots[ch.key()] = ChannelSnapshot(ch.key(), 0, "", 0, 0)
        record = self.store.step(cur.boundary)
        offsets = {c.key(): hi for c, (_, hi) in record.offsets.items()} if record else {}
        manifest = cur.manifest(offsets, committed)
        manifest["parallelism"] = {s.name: s.parallelism for s in self.spec.stages}  # read by checkpoint/rescale.py
        manifest["time"] = round(self.wall(), 3)  # when committed (retention by age)
        manifest["tally"] = self.tally_at(cur.boundary)  # rows read and dead letters up to it (tally.py)
        low = min([s.step for s in cur.snapshots.values()] + [cur.boundary])
        steps = {s: self.store.step(s) for s in range(low + 1, cur.boundary + 1)}
        missing = sorted(s for s, r in steps.items() if r is None)
        if missing:  # a restore from this cut would re-read these steps' sources: without offsets it could not
            cur.abort(f"the step log lost the offsets of steps {missing}")
            self.metrics.checkpoints.labels(self.spec.metrics_label, "aborted").inc()
            log.warning("checkpoint aborted: it could not be restored",
                        extra={"epoch": cur.epoch, "boundary": cur.boundary, "missing_steps": missing})
            self.on_aborted(cur.epoch, f"the step log lost the offsets of steps {missing}")
            return None
        manifest["steps"] = {str(s): {c.key(): list(o) for c, o in r.offsets.items()}
                             for s, r in steps.items() if r is not None}
        if self.spec.event_time:  # each step's watermark, and the channels' event times up to the boundary
            manifest["watermarks"] = {str(s): r.watermark for s, r in steps.items() if r is not None}
            manifest["befores"] = {str(s): r.clock.before for s, r in steps.items() if r is not None}
            manifest["event_time"] = self.event_time_at(cur.boundary)
        if self.spec.lookups:  # each step's lookup tables' versions
            manifest["tables"] = {str(s): r.tables for s, r in steps.items() if r is not None and r.tables}
        if self.spec.processing_time:  # each step's processing time, for a keyed function's clock
            manifest["times"] = {str(s): r.now for s, r in steps.items() if r is not None and r.now is not None}
        try:
            if self.before_commit is not None:
                self.before_commit()
            self.pointer.commit(manifest)
        except (CommitFailed, KazooException) as exc:
            cur.abort(f"commit failed: {exc}")
            self.needs_settle = False  # nothing was lost: the next epoch may start normally
            self.metrics.checkpoints.labels(self.spec.metrics_label, "commit_failed").inc()
            log.warning("checkpoint commit failed", extra={"epoch": cur.epoch, "error": str(exc)})
            self.on_aborted(cur.epoch, f"commit failed: {exc}")
            return None
        cur.committed()
        self.uncommitted = {}  # the manifest holds the newest now, and the prune below may take the others
        keep = self._after_commit(manifest)
        size = self._publish(manifest, keep)
        now = self.clock()
        seconds = now - cur.started_at
        self.last, self.last_committed_at = manifest, now
        self.metrics.checkpoints.labels(self.spec.metrics_label, "committed").inc()
        self.metrics.checkpoint_seconds.observe(seconds)
        self.metrics.checkpoint_bytes.set(size)
        self.history.append({"epoch": cur.epoch, "boundary": cur.boundary, "seconds": round(seconds, 4),
                             "bytes": size, "inflight": len(cur.inflight), "kept": sorted(keep)})
        log.info("checkpoint committed", extra=self.history[-1])
        return manifest

    def _after_commit(self, manifest: dict[str, Any]) -> set[int]:
        buried_up_to: list[int] = []
        before = self.last["states"] if self.last is not None else {}  # the previous commit's snapshots
        for key, snap in manifest["states"].items():
            ch = Channel.parse(key)
            edges = []
            for edge in self.graph.stage(ch.stage).inputs:
                for uc in range(self.graph.stage(edge.upstream).parallelism):
                    if edge.partition.number == 0 and uc != ch.index:
                        continue  # forward: only channel i feeds channel i
                    edges.append(EdgeKey(edge.upstream, uc, ch.stage, edge.partition.number, ch.index).key())
            held_from = int(before[key]["step"]) + 1 if key in before else 1
            self.tables.bury_range(edges, 1, int(snap["step"]), held_from)
            buried_up_to.append(int(snap["step"]))
        floor = min([*buried_up_to, int(manifest["boundary"]), int(manifest["gt_last"])])
        self.tables.trim(floor)
        committed = self._committed_epochs()  # this run's and earlier ones
        self.known[int(manifest["epoch"])] = (int(manifest["boundary"]), float(manifest["time"]))
        keep = self.retained(committed, int(manifest["epoch"]))
        newest = committed[-self.spec.checkpoint_retain:]
        self.store.trim_steps(min([floor, *(self._known(e)[0] for e in newest if e in keep)]))
        pointer = self.pointer
        if pointer is not None:
            self._zk(lambda: pointer.prune(keep), "pruning checkpoints")
        return keep | {self.epoch}

    def retained(self, committed: list[int], newest: int) -> set[int]:
        """What retention keeps of ``committed`` (oldest first) now that ``newest`` committed."""
        keep = set(committed[-self.spec.checkpoint_retain:])
        max_age = self.spec.checkpoint_max_age_s
        if max_age:
            now = self.wall()
            keep = {e for e in keep if e == newest or now - self._known(e)[1] <= max_age}
        return keep | (self.pinned() & set(committed)) | {newest}

    def discard(self, epochs: set[int]) -> None:
        """Delete committed checkpoints (ZooKeeper, then storage through a worker): a restore from an older
        one starts a new history, so a later failure never resumes from what came after it before."""
        pointer = self.pointer
        if pointer is not None:
            kept = set(self._committed_epochs()) - epochs
            self._zk(lambda: pointer.prune(kept), "discarding checkpoints")
        self.stored -= epochs
        self.members.call_any("discard_checkpoints", {"epochs": sorted(epochs)}, "discard the later checkpoints")
        log.info("later checkpoints discarded", extra={"epochs": sorted(epochs)})

    def _known(self, epoch: int) -> tuple[int, float]:
        """``epoch``'s boundary and commit time, from its manifest in ZooKeeper the first time (one written
        before manifests carried a time counts from when it was first read)."""
        if epoch not in self.known:
            pointer = self.pointer
            manifest = self._zk(lambda: pointer.manifest(epoch), "reading a committed checkpoint") \
                if pointer is not None else None
            self.known[epoch] = (int(manifest["boundary"]) if manifest else 0,
                                 float(manifest.get("time", self.wall())) if manifest else self.wall())
        return self.known[epoch]

    def _publish(self, manifest: dict[str, Any], keep: set[int]) -> int:
        """A worker writes the manifest beside the snapshots and prunes the rest; returns the checkpoint's
        bytes. Best effort: the commit in ZooKeeper already happened, and the next commit prunes again."""
        try:
            done = self.members.call_any("publish_checkpoint", {"manifest": manifest, "keep": sorted(keep)},
                                         "publish the checkpoint's manifest")
            return int(done["bytes"])
        except Exception as exc:
            log.warning("checkpoint manifest not written to storage",
                        extra={"epoch": manifest["epoch"], "error": str(exc)})
            return sum(int(s.get("bytes", 0)) for s in manifest["states"].values())

    def age(self) -> float | None:
        return None if self.last_committed_at is None else self.clock() - self.last_committed_at
