"""The coordinator: steps, checkpoints, and recovery when a worker is lost.

One loop, one thread, so every decision is taken in a definite order. Each
turn it (1) handles the workers' messages and any lost worker, (2) commits
every step whose tasks are all done, in order, sending each commit to the
command log, (3) moves the current checkpoint along, (4) triggers the next
step if the window allows and a trigger reason holds, (5) once the commits
are in the log, releases their steps (the barrier). Lockstep is a window of one step;
pipelined mode keeps up to ``window`` uncommitted steps in flight, and its
checkpoints stay consistent through vector clocks (``checkpoint/``).

    STARTING --all workers joined, created (or reopened at a checkpoint)--> RUNNING
    RUNNING  --a step's tasks all done--> that step COMMITTED (in order)
    RUNNING  --worker lost--> RECOVERING --lineage plan applied / rolled back--> RUNNING
             (lost: its process exited or its pod was deleted, or the command log says a ring
              member saw its heartbeat expire: hung, stopped or cut off)
    RUNNING  --task failed / no survivor / stalled--> FAILED
    RUNNING  --max steps committed, or input exhausted and nothing in flight--> DONE

A lost worker does not stop the steps in flight under lineage recovery:
survivors keep running what they have, the plan's tasks join their NTTs, and
the steps commit when the re-run work is done. Under checkpoint recovery
every worker reopens the newest committed cut and the steps after it replay
from the step log. A replacement worker is not waited for: it is started
once the next step has committed (so its JVM start does not slow the
survivors down); when it joins it is created and, once a step is released
with no checkpoint in progress, takes stateless channels back (from the next
step handed out).

Every decision is written to the command log (``commandlog/``) before it is
acted on: the run's start, each step with its offsets before its tasks go
out, each commit before its output is released, each recovery epoch before
its plan is applied, each checkpoint. A coordinator that restarts folds the
log and continues where it says (uncommitted steps re-run with the offsets
they were started with); workers of an older epoch are fenced off.

The loop is the step protocol; each other protocol has its own module, most
as an object the coordinator holds with the state that protocol owns: who the
workers are (``members.py``: Members), the command log (``journal.py``:
Journal), what the sources offer and the next step reads (``offsets.py``:
SourceOffsets), releasing committed steps (``release.py``: Releases),
checkpoints (``checkpoints.py``: CheckpointManager), drains (``evacuation.py``:
Evacuations), losses seen through heartbeats (``detection.py``: Detection);
still free functions over the whole coordinator: how a worker is admitted to
this run and one of another run kept out (``admission.py``) and how a loss is
recovered (``losses.py``). Recovery plans are ``recovery.py``. The
cluster backend (``cluster.base``) is the only thing that differs between
``ftpipeline run`` and the Kubernetes operator.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ftpipeline.checkpoint.pointer import CheckpointPointer
from ftpipeline.cluster.base import ClusterBackend
from ftpipeline.commandlog.zklog import CommandLog
from ftpipeline.control.store import RunStore, StepRecord
from ftpipeline.coordinator.admission import admit_newcomer, run_token, running_to_keep, start_workers
from ftpipeline.coordinator.checkpoints import CheckpointManager
from ftpipeline.control.redisclient import watch as redis_watch
from ftpipeline.coordinator.detection import Detection, inject_faults
from ftpipeline.coordinator.errors import Interrupted, PipelineFailed, TaskFailed
from ftpipeline.coordinator.evacuation import Evacuations, plan_handover
from ftpipeline.coordinator.tally import Tally
from ftpipeline.coordinator.outages import ControlPlane
from ftpipeline.coordinator.faults import FaultPlan
from ftpipeline.coordinator.journal import Journal
from ftpipeline.coordinator.losses import rebuild_lost_store, recover
from ftpipeline.coordinator.members import Members
from ftpipeline.coordinator.offsets import SourceOffsets
from ftpipeline.coordinator.recovery import RecoveryRecord
from ftpipeline.coordinator.stepstats import StepStats
from ftpipeline.coordinator.reports import Observer, RunResult
from ftpipeline.coordinator.release import Releases, sample_buffers
from ftpipeline.coordinator.trigger import Reason, StepTrigger
from ftpipeline.dataflow.graph import Graph
from ftpipeline.dataflow.lookup import TableVersions
from ftpipeline.eventtime.columns import END_OF_INPUT
from ftpipeline.eventtime.watch import EventTimeWatch
from ftpipeline.eventtime.watermarks import Watermarks
from ftpipeline.lineage.naming import Channel, Slot, Task, TaskKind, WorkerId
from ftpipeline.lineage.planner import PlanningError
from ftpipeline.lineage.stepclock import StepClock
from ftpipeline.lineage.tables import LineageTables
from ftpipeline.obs.errors import one_line
from ftpipeline.obs.metrics import RunMetrics
from ftpipeline.obs.phases import StepPhases
from ftpipeline.spec.model import PipelineSpec
from ftpipeline.worker.transport import SidecarClient, Unreachable

__all__ = ["Coordinator", "Interrupted", "Observer", "PipelineFailed", "RunResult"]

log = logging.getLogger("ftpipeline.coordinator")

# Longest wait for a worker event (a blocking take from the inbox, which returns as soon as one arrives): bounds
# how late timers (trigger, checkpoints, detection) are looked at.
POLL_S = 0.02


class Coordinator:
    def __init__(
        self,
        spec: PipelineSpec,
        store: RunStore,
        tables: LineageTables,
        cluster: ClusterBackend,
        observer: Observer | None = None,
        faults: FaultPlan | None = None,
        metrics: RunMetrics | None = None,
        clock: Callable[[], float] = time.monotonic,
        startup_timeout_s: float = 300.0,
        stall_timeout_s: float = 300.0,
        pointer: CheckpointPointer | None = None,
        resume: bool = False,
        resume_epoch: int | None = None,
        sample_every: int = 10,
        should_stop: Callable[[], str | None] | None = None,
        commands: CommandLog | None = None,
        compact_every: int = 50,
    ) -> None:
        self.spec = spec
        self.graph = Graph.physical(spec)
        self.store = store
        self.tables = tables
        self.cluster = cluster
        self.observer = observer or Observer()
        self.faults = faults
        self.metrics = metrics or RunMetrics(spec.metrics_label)
        self.clock = clock
        self.startup_timeout_s = startup_timeout_s
        self.stall_timeout_s = stall_timeout_s
        self.resume = resume
        self.resume_epoch = resume_epoch
        self.sample_every = sample_every
        self.should_stop = should_stop  # polled every turn: a reason to stop, or None
        # ZooKeeper and Redis out of reach pause the run (outages.py); decisions go to the command log first
        self.control = ControlPlane(self.metrics.control_plane_faults, spec.metrics_label, self.observer,
                                    self._interrupt_if_asked)
        self.journal = Journal(commands, tables, store, self.metrics, spec.metrics_label, compact_every, self.control)
        if commands is not None:
            self.control.watch_zookeeper(commands.zk)
        redis_watch(store.r, lambda e: self.control.unavailable("redis", one_line(e)),
                    lambda: self.control.recovered("redis"), self._interrupt_if_asked)
        self.generation = store.generation()  # written by open_session: gone if Redis restarts empty
        self._generation_checked = 0.0
        self.buffer_samples: list[dict[str, Any]] = []
        self.members = Members(spec, cluster, store, clock)
        # losses seen in the command log (a ring neighbour's report) and the workers kept on probation
        self.detection = Detection(spec, self.members, self.journal, self.control, cluster, self.metrics, clock,
                                   self.lost)
        self.ckpt = CheckpointManager(spec, self.graph, store, tables, pointer, self.metrics, clock, self.members,
                                      self.control)
        self.ckpt.on_aborted = self.observer.on_checkpoint_aborted
        self.ckpt.tally_at = lambda boundary: self.tally.up_to(boundary)
        self.watermarks = Watermarks(self.graph.sources(), clock)  # each step's, recorded with it (eventtime/)
        self.event_watch = EventTimeWatch(spec, lambda *said: self.observer.on_event_time(*said),
                                          self.metrics.held_back)  # eventtime/watch.py: late drops, held back
        self.table_versions = TableVersions(spec.lookups)  # each lookup table's, recorded with each step
        self.ckpt.event_time_at = self.watermarks.cut
        self.owner = f"coordinator-{uuid.uuid4().hex[:8]}"
        self.run_token = ""         # this run's, given to every worker it admits (admission.py)
        self.placement: dict[Channel, WorkerId] = {}
        self.committed = 0          # every task of every step <= committed is done, and it is released
        self.triggered = 0
        self.outstanding: dict[str, Task] = {}
        self.sources = SourceOffsets(self.graph)   # what each source slot reported, and reads next (offsets.py)
        self._streams = spec.reads_kafka  # whose lag the observer shows
        self.recoveries: list[RecoveryRecord] = []
        self.evacuations = Evacuations(clock)  # workers asked to leave (a drain): handed over, not recovered
        self.last_progress = 0.0
        self._started_at = 0.0
        self.tally = Tally()          # rows read and dead letters, each counted once (tally.py)
        self.rollbacks: list[RecoveryRecord] = []  # the run rolled back by itself (a Redis that came back empty)
        self.awaiting_commit: list[RecoveryRecord] = []
        self._replays: set[int] = set()
        self._checked_log_for = -1
        self._exhausted = False
        self._force_step = False
        self.stats = StepStats()      # what each step took and did, for the result and metrics (stepstats.py)
        self._replay_until = 0        # steps up to this one are re-run after a rollback
        self.phases = StepPhases()    # where a step's time goes (obs/phases.py)
        # decided steps released in order once their commits are in the log (release.py)
        self.releases = Releases(self.members, store, self.journal, self.control, self.phases, stall_timeout_s, clock)

    # --- workers -----------------------------------------------------------
    @property
    def workers(self) -> list[WorkerId]:
        return self.members.workers

    def client(self, worker: WorkerId) -> SidecarClient:
        return self.members.client(worker)

    def clients_for(self, workers: list[WorkerId]) -> dict[WorkerId, SidecarClient]:
        return self.members.clients_for(workers)

    def _hand_back(self) -> None:
        if self.ckpt.busy:  # a worker joining mid-checkpoint would unbalance its deficit counts
            return
        self.placement, moves = self.members.hand_back(self.placement, self.graph.is_stateful)
        if moves:
            self.tables.set_placement(moves)

    # --- events ------------------------------------------------------------
    def _poll(self, timeout_s: float) -> None:
        for event in self.store.receive(timeout_s):
            self._handle(event)
        for dead in self.cluster.lost():
            self.members.check_can_run(dead)
            self.lost(dead, "gone")
        self.detection.follow_deaths()
        self.journal.maybe_compact()
        inject_faults(self.faults, self.triggered, self.stats.done_in_step, self.elapsed(), self.ckpt.busy, self.members,
                      self.cluster)
        self.check_generation()

    def check_generation(self, now: bool = False) -> None:
        """Every 0.5 s (``now``: at once): has Redis restarted without this run's state?"""
        if self.generation is not None and (now or self.clock() - self._generation_checked > 0.5):
            self._generation_checked = self.clock()
            if self.store.generation() != self.generation:
                self.evacuations.interrupted()
                rebuild_lost_store(self)

    def elapsed(self) -> float:
        return self.clock() - self._started_at

    def _handle(self, event: dict[str, Any]) -> None:
        kind = event["t"]
        if kind == "done":
            self.metrics.dead_letters.inc(event.get("dead_new", 0))  # counted once per step, however replayed
            task = self.outstanding.pop(event["id"], None)
            if task is not None and not event["recovery"]:
                self.phases.task(task.step, event.get("parts", {}))
            if task is not None:
                self.stats.task_done(task.step, event["w"])
                self.last_progress = self.clock()
                source = event["kind"] == "source"
                first = self.tally.done(task.stage, task.channel, task.step, event["rows_in"] if source else 0,
                                        int(event.get("dead", 0)), int(event.get("late", 0)))
                if source and first:
                    self.metrics.source_rows.inc(event["rows_in"])
                if first:
                    self.metrics.late_records.inc(int(event.get("late", 0)))
                if first and event["kind"] == "aggregate":
                    self.event_watch.task_done(task.stage, task.step, event["rows_in"], int(event.get("late", 0)))
                for said in event.get("warnings", []):  # a keyed function's timer far behind the watermark, ...
                    self.event_watch.warned(task.stage, said)
                if source:
                    tmax = event.get("tmax")
                    self.watermarks.observe(task.ref, task.step, int(tmax) if tmax is not None else None,
                                            event["rows_in"])
                    if first:  # a re-run reads an older step again: not the channel's time going back
                        self.event_watch.read(task.ref, task.step, event.get("tmin"), tmax,
                                              self.watermarks.bound.get(task.ref, 0))
                if event["recovery"] or task.step <= self._replay_until:
                    self.metrics.replayed.inc(event["rows_in"])
                    self.stats.recomputed_rows += event["rows_in"]
            if event.get("diverged"):  # a keyed function's re-run emitted other rows (lineage/determinism.py)
                log.warning("a keyed function emitted other rows when re-run than the first time: it reads time or "
                            "randomness outside ctx", extra={"task": event["id"], "worker": event["w"],
                                                              "objects": event["diverged"]})
                stage = task.stage if task is not None else event["id"].split(":")[1].rpartition(".")[0]
                self.metrics.diverged(stage, int(event["diverged"]))
                self.observer.on_nondeterministic(stage, event["id"], int(event["diverged"]))
        elif kind == "fenced":  # a zombie woke up: its commit, sink write or release was refused
            log.warning("a worker let go was fenced off", extra={"worker": event["w"], "what": event["what"]})
            self.observer.on_fenced(WorkerId(event["w"]), event["what"])
        elif kind == "failed" and event["id"] not in self.outstanding:  # superseded by a recovery's epoch
            log.warning("a superseded task failed: ignored", extra={"task": event["id"], "error": event["error"]})
        elif kind == "failed":
            raise TaskFailed(event["id"], event["w"], event["error"], event.get("user"))
        elif kind == "received":
            slot = Slot.parse(event["ch"])
            self.sources.received(slot, event["start"], event["n"], event["exhausted"])
            self.metrics.lag(slot.stage, slot.index, self.sources.lag().get(slot, 0))
        elif kind == "listed":
            self.sources.found(Channel.parse(event["ch"]), [int(x) for x in event["slots"]])
        elif kind == "table":  # a Kafka lookup table's ends (dataflow/lookup_kafka.py)
            self.table_versions.reported(event["stage"], {int(p): int(end) for p, end in event["ends"].items()})
        elif kind == "replay":
            self._replays.add(int(event["step"]))
        elif kind == "leaving" and not self.evacuations.request(WorkerId(event["w"]), self.workers):
            self.cluster.kill_worker(WorkerId(event["w"]))  # no handover for it: it goes as a loss would
        elif kind in ("checkpointed", "checkpoint_failed") and (leaving := self.evacuations.snapshot_of(event)):
            self._hand_over(leaving.worker, event)
        elif kind in ("checkpointed", "inflight", "checkpoint_failed"):
            self.ckpt.on_event(event)
        elif kind == "joined" and event["w"] in self.members.joining:
            admit_newcomer(self, WorkerId(event["w"]))

    def lost(self, dead: WorkerId, reason: str = "", how: str = "") -> None:
        self.phases.forget_open()  # the steps in flight now measure the recovery
        if self.members.knows(dead):  # not one already handled (the evacuated leaver's own exit)
            self.evacuations.forget(dead)
            self.evacuations.interrupted()
        recover(self, dead, reason, how)

    def _ask_snapshot(self, worker: WorkerId, epoch: int) -> None:
        try:
            self.client(worker).call("handover", {"epoch": epoch})
        except Unreachable as exc:  # dying now: its loss is reported next and recovered
            log.warning("handover call failed", extra={"worker": worker, "error": str(exc)})
            self.evacuations.forget(worker)

    def _hand_over(self, leaver: WorkerId, event: dict[str, Any]) -> None:
        """The leaver's snapshot is written (or not): move its channels, let it go, replace it (evacuation.py)."""
        if event["t"] == "checkpoint_failed":
            log.error("handover snapshot failed: the leaving worker goes as a loss",
                      extra={"worker": leaver, "error": event.get("error")})
            self.cluster.kill_worker(leaver)
            return
        started = self.clock()
        survivors = [w for w in self.workers if w != leaver]
        try:
            record = plan_handover(self.graph, self.tables, self.journal, self.owner, survivors,
                                   self.clients_for(survivors), self.ckpt.last, leaver, list(event["snapshots"]),
                                   started, self.clock)
        except PlanningError as exc:  # nothing moved: the leaver goes as a loss, recovered as one
            log.error("no handover plan: the leaving worker goes as a loss", extra={"worker": leaver, "error": str(exc)})
            self.cluster.kill_worker(leaver)
            return
        # the leaver's message counts go with it: the next checkpoint settles them first, as after a loss
        self.ckpt.abort(f"worker {leaver} evacuated")
        self.outstanding.update({t.id: t for _, t in record.tasks})
        self.placement = dict(record.placement)
        self.journal.close_ring_around(leaver, "evacuated")
        self.members.remove(leaver)
        self.cluster.kill_worker(leaver)  # fenced already: its pod or processes go now
        self.members.replace_planned(self.clock(), self.committed)
        self.evacuations.done.append(record)
        self.metrics.evacuations.inc()
        self.metrics.workers_ready.set(len(self.workers))
        self.observer.on_evacuated(record)
        self.last_progress = self.clock()
        log.info("evacuated", extra=record.summary())

    def rewind(self, record: RecoveryRecord, manifest: dict[str, Any] | None, gt_last: int) -> None:
        """After a rollback: progress is the cut's boundary; later steps replay from the step log."""
        boundary = record.boundary or 0
        self.phases.forget_open()
        self._replay_until = max(self._replay_until, self.triggered)
        self.outstanding = {t.id: t for _, t in record.tasks}
        self.committed = self.triggered = boundary
        self.releases.rewound(gt_last, boundary)
        offsets = (manifest or {}).get("offsets", {})
        self.sources.reset({Slot.parse(c): int(v) for c, v in offsets.items()})
        self.watermarks.restore((manifest or {}).get("event_time"), boundary)
        self.store.set_offsets(self.sources.next)
        self._checked_log_for = -1
        # messages carry the reopened cut's epoch until the next checkpoint, which gets a fresh number
        self.ckpt.restored(int(manifest["epoch"]) if manifest else 0)

    # --- steps -------------------------------------------------------------
    def _maybe_trigger(self, trigger: StepTrigger) -> None:
        if self.triggered - self.committed >= self.spec.window or self.evacuations.holds_steps:
            return
        if not self.control.available("zookeeper"):
            return  # its start could not be logged: no step goes out while the log is out of reach
        if self.spec.max_steps is not None and self.triggered >= self.spec.max_steps:
            return
        step = self.triggered + 1
        if self.ckpt.due(self.triggered):
            if self.ckpt.needs_settle and (self.triggered != self.committed or self.outstanding):
                return  # drain before an epoch that follows a loss
            self.ckpt.start(self.triggered)
            self._force_step = True
        if self._checked_log_for != step or step in self._replays:
            self._checked_log_for = step
            self._replays.discard(step)
            recorded = self.store.step(step)
            if recorded is not None:  # the step log has it: re-run with exactly those offsets (and watermark)
                trigger.replay(True)
                self._trigger(trigger, step, Reason.REPLAY, recorded.offsets, recorded.watermark, recorded.clock)
                return
        if not self.table_versions.ready():
            return  # a Kafka lookup table's ends not reported yet: the step would have no version to record
        plan = self.sources.plan()
        self._exhausted = plan.reported and plan.exhausted
        if self._exhausted and self.watermarks.end():  # one last step: every window is final
            self._trigger(trigger, step, Reason.END_OF_INPUT, plan.offsets, END_OF_INPUT)
            return
        if self._exhausted or not plan.reported:
            return
        now = self.clock()
        trigger.received(plan.rows, now)
        reason = trigger.due(now)
        if reason is None and self._force_step:
            reason = Reason.CHECKPOINT
        finished = self.sources.finished()
        watermark = self.watermarks.next(finished)
        if reason is None and watermark != self.watermarks.current and trigger.idle_for(now, self.spec.trigger.timer_ms):
            reason = Reason.WATERMARK  # no records, but windows may close (a channel went idle)
        if reason is Reason.CHECKPOINT and plan.rows == 0 and watermark == self.watermarks.current:
            self.ckpt.idle_step(step)
        if reason is not None:
            self._trigger(trigger, step, reason, plan.offsets, watermark)
            self.event_watch.decided(self.watermarks, finished)

    def _trigger(self, trigger: StepTrigger, step: int, reason: Reason, offsets: dict[Channel, tuple[int, int]],
                 watermark: int | None, recorded: StepClock | None = None) -> None:
        """Start ``step``; ``recorded``: the clock a replay recorded (None: ``watermark``, the processing time
        now and each lookup table's newest version, recorded with it for its re-runs and replays)."""
        now = self.clock()
        self.phases.mark(step, "trigger", now)
        wall = time.time_ns() // 1000
        clock = StepClock(watermark, wall, self.table_versions.now(), before=self.watermarks.before(step)) \
            if recorded is None else (
            recorded if recorded.now is not None else replace(recorded, now=wall))  # recorded before clocks were
        self.store.record_step(StepRecord(step, offsets, reason.value, clock))  # before it runs
        # in the command log while the tasks run; settled before anything else is logged (journal.py)
        self.journal.append_ahead("step-started", step=step, offsets={c.key(): list(o) for c, o in offsets.items()},
                                  **clock.to_json())
        self.watermarks.record(step, watermark)
        if watermark is not None and watermark != END_OF_INPUT:
            self.metrics.watermark.set(watermark / 1e6)
        behind = self.watermarks.lag_seconds()
        if behind is not None:
            self.metrics.event_time_lag.set(behind)
        if self.watermarks.enabled:
            self.observer.on_watermark(step, watermark, behind)
        self.sources.recorded(offsets)
        self.observer.on_step_recorded(step, offsets, watermark)
        lag = self.sources.lag()
        for slot, records in lag.items():
            self.metrics.lag(slot.stage, slot.index, records)
        if self._streams:
            self.observer.on_source_lag(sum(lag.values()))
        left = self.sources.steps_left()
        if left is not None:  # every source ends, and the reports say when
            self.observer.on_steps_expected(min(step + left, self.spec.max_steps or step + left))
        self.triggered = step
        self._force_step = False
        epoch = self.ckpt.epoch
        tasks = [replace(t, ckpt=epoch) if t.kind is TaskKind.SOURCE else t for t in self.graph.step_tasks(step, offsets)]
        self.tables.assign([(self.placement[t.ref], t) for t in tasks])
        self.outstanding.update({t.id: t for t in tasks})
        self.phases.mark(step, "assigned", self.clock())
        rows = sum(hi - lo for lo, hi in offsets.values())
        self.stats.started(step, now, rows)
        trigger.stepped(now)
        self.metrics.current.set(step)
        self.metrics.triggers.labels(self.spec.metrics_label, reason.value).inc()
        self.observer.on_step_started(step, reason, rows)
        for w, answer in self.members.call_all(self.workers, "step", {"step": step}).items():
            if isinstance(answer, Exception):  # a worker dying right now is found by the cluster backend
                log.warning("step call failed", extra={"worker": w, "error": str(answer)})
        self.phases.mark(step, "sent", self.clock())
        if not self.outstanding or self.last_progress < now - 1:
            self.last_progress = now

    def _commit_ready(self) -> None:
        """Decide every step whose tasks are all done, in order: its commit is sent to the command
        log without waiting, so the next step can go out while ZooKeeper writes it; the output
        is released by ``release.Releases`` once the commit is in the log."""
        while self.committed < self.triggered:
            step = self.committed + 1
            if any(t.step <= step for t in self.outstanding.values()):
                return
            self.journal.append_ahead("step-committed", step=step)  # decided: a restart re-releases it if need be
            self.phases.mark(step, "done", self.clock())
            self.committed = step
            self.releases.decided(step)

    def _released(self, step: int) -> None:
        """``step`` is released (``release.py``): its time, metrics and observer call; the checkpoint manager,
        the channels a newcomer takes back and the buffer samples hear of it."""
        now = self.clock()
        elapsed, rows = self.stats.released(step, now, now - self._started_at)
        for record in self.awaiting_commit:
            record.to_commit_seconds = now - record.detected_at
            self.metrics.recovery_to_commit.observe(record.to_commit_seconds)
        self.awaiting_commit = []
        self.metrics.steps.inc()
        self.metrics.committed.set(step)
        self.metrics.step_seconds.observe(elapsed)
        self.observer.on_step_committed(step, rows, elapsed)
        self.phases.mark(step, "released", now)
        self.phases.close(step)
        self.ckpt.released(step)
        self._hand_back()
        if self.sample_every and step % self.sample_every == 0:
            self.buffer_samples.append(sample_buffers(self.members, step))

    def _checkpoint_tick(self) -> None:
        manifest = self.ckpt.try_commit(self.releases.released)
        if manifest is not None:
            self.journal.append("checkpoint-committed", epoch=int(manifest["epoch"]), boundary=int(manifest["boundary"]))
            self.metrics.checkpoint_step.set(manifest["boundary"])
            self.tally.settle(int(manifest["boundary"]))
            self.watermarks.settle(int(manifest["boundary"]))
            self.observer.on_checkpoint(self.ckpt.history[-1])
        age = self.ckpt.age()
        if age is not None:
            self.metrics.checkpoint_age.set(age)

    def _finished(self) -> bool:
        if self.spec.max_steps is not None and self.committed >= self.spec.max_steps:
            return True
        return (self._exhausted and not self.watermarks.end() and self.triggered == self.committed
                and not self.outstanding)

    def run(self) -> RunResult:
        self._started_at = self.clock()
        kept = running_to_keep(self)
        self.journal.open(self.resume, kept)
        self.run_token = run_token(self.journal.run_epoch)
        start_workers(self, kept)
        trigger = StepTrigger(self.spec.trigger.records, self.spec.trigger.timer_ms, self.spec.trigger.tick_ms)
        trigger.start(self.clock())
        self.last_progress = self.clock()
        while True:
            self._poll(POLL_S)
            self.check_stop()
            self._commit_ready()
            overdue = self.evacuations.start(self.triggered == self.committed and not self.outstanding,
                                             self.ckpt.busy, self.ckpt.allocate_epoch, self._ask_snapshot)
            if overdue is not None:
                self.cluster.kill_worker(overdue)
            self.members.start_replacements(self.committed)
            self._checkpoint_tick()
            finished = self._finished()
            if not finished:
                self._maybe_trigger(trigger)  # the next step goes out while the last one's commit is written
            self.releases.release_ready(self._released)
            if finished and not self.releases.pending:
                break
            if self.outstanding and self.clock() - self.last_progress > self.stall_timeout_s:
                pending = ", ".join(sorted(self.outstanding)[:10])
                raise PipelineFailed(f"no progress for {self.stall_timeout_s:.0f}s; pending: {pending}")
        return self.result()

    def result(self) -> RunResult:
        """What the run did so far: at its end, or when it is interrupted (a stream stopped by Ctrl-C)."""
        return RunResult(
            committed=self.committed,
            source_rows=self.tally.source_rows,
            dead_letters=self.tally.dead_letters,
            late_records=self.tally.late, late_by_stage=self.tally.late_by_stage(),
            watermark=self.watermarks.current,
            rollbacks=list(self.rollbacks),
            seconds=self.clock() - self._started_at if self._started_at else 0.0,
            recoveries=self.recoveries,
            evacuations=list(self.evacuations.done),
            outages=list(self.control.outages),
            stats={**self.store.stats(), "recomputed_rows": self.stats.recomputed_rows,
                   "heartbeat_losses": self.detection.heartbeat_losses, "log_znodes_max": self.journal.log_znodes_max},
            step_seconds=self.stats.step_seconds,
            tasks_by_worker=dict(self.stats.tasks_by_worker),
            joins=list(self.members.joins),
            checkpoints=list(self.ckpt.history),
            buffers=list(self.buffer_samples),
            commit_at=list(self.stats.commit_at),
            phases=self.phases.summary(),
        )

    def check_stop(self) -> None:
        reason = self.should_stop() if self.should_stop is not None else None
        if reason:
            self.journal.append("suspended", reason=reason)
            raise Interrupted(reason)

    def _interrupt_if_asked(self) -> None:
        """A stop request while the control plane is out of reach: nothing can be logged, just stop."""
        reason = self.should_stop() if self.should_stop is not None else None
        if reason:
            raise Interrupted(reason)

    def shutdown(self, workers: bool = True) -> None:
        """The run is over. ``workers=False``: leave them running, for the coordinator that takes the
        pipeline over next (an operator handing over; ``admission.running_to_keep``)."""
        self.control.unwatch()
        self.members.shutdown(workers)
