"""The coordinator: steps, checkpoints, and recovery when a worker is lost.

One loop, one thread, so every decision is taken in a definite order. Each
turn it (1) handles the workers' messages and any lost worker, (2) commits
every step whose tasks are all done, in order (the barrier releases it),
(3) moves the current checkpoint along, (4) triggers the next step if the
window allows and a trigger reason holds. Lockstep is a window of one step;
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
survivors down); when it joins it is created and, at a step boundary with no
checkpoint in progress, takes stateless channels back.

Every decision is written to the command log (``commandlog/``) before it is
acted on: the run's start, each step with its offsets before its tasks go
out, each commit before its output is released, each recovery epoch before
its plan is applied, each checkpoint. A coordinator that restarts folds the
log and continues where it says (uncommitted steps re-run with the offsets
they were started with); workers of an older epoch are fenced off.

The cluster backend (``cluster.base``) is the only thing that differs between
``ftpipeline run`` and the Kubernetes operator.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from ftpipeline.checkpoint.pointer import CheckpointPointer
from ftpipeline.cluster.base import ClusterBackend
from ftpipeline.commandlog.zklog import CommandLog, Follower
from ftpipeline.control.store import RunStore, StepRecord
from ftpipeline.coordinator.checkpoints import CheckpointManager
from ftpipeline.coordinator.faults import CrashPoint, FaultPlan
from ftpipeline.coordinator.protocol import Create, startup_decision
from ftpipeline.coordinator.recovery import RecoveryRecord, choose_strategy, recover_lineage, rollback
from ftpipeline.coordinator.restarts import BudgetExhausted, RestartBudget, RestartPolicy
from ftpipeline.coordinator.trigger import Reason, StepTrigger
from ftpipeline.dataflow.graph import Graph
from ftpipeline.dataflow.sources import channel_share, rows_per_step
from ftpipeline.lineage.naming import Channel, Task, TaskKind, WorkerId
from ftpipeline.lineage.placement import adopt, hand_back, initial_placement
from ftpipeline.lineage.planner import PlanningError
from ftpipeline.lineage.tables import LineageTables
from ftpipeline.obs.metrics import RunMetrics
from ftpipeline.spec.model import PipelineSpec
from ftpipeline.worker.transport import SidecarClient

log = logging.getLogger("ftpipeline.coordinator")


class PipelineFailed(RuntimeError):
    """The run cannot continue; the message says why, naming the task or worker."""


class Interrupted(RuntimeError):
    """The run was asked to stop (operator: suspend, restart, deletion); its state stays resumable."""


class Observer:
    """Receives progress events (the CLI draws them; the operator turns them into status)."""

    def on_workers_starting(self, workers: list[WorkerId]) -> None: ...
    def on_worker_joined(self, worker: WorkerId, ready: int, total: int) -> None: ...
    def on_step_started(self, step: int, reason: Reason, rows: int) -> None: ...
    def on_step_committed(self, step: int, rows: int, seconds: float) -> None: ...
    def on_worker_lost(self, worker: WorkerId) -> None: ...
    def on_recovery(self, record: RecoveryRecord) -> None: ...
    def on_checkpoint(self, info: dict[str, Any]) -> None: ...


@dataclass
class RunResult:
    committed: int
    source_rows: int
    seconds: float
    recoveries: list[RecoveryRecord] = field(default_factory=list)
    stats: dict[str, int] = field(default_factory=dict)
    step_seconds: list[float] = field(default_factory=list)
    tasks_by_worker: dict[str, int] = field(default_factory=dict)
    joins: list[dict[str, Any]] = field(default_factory=list)  # replacements: worker, committed step at join
    checkpoints: list[dict[str, Any]] = field(default_factory=list)
    buffers: list[dict[str, Any]] = field(default_factory=list)  # held bytes per worker, every few steps
    commit_at: list[float] = field(default_factory=list)          # seconds since start when each step committed


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
        self.graph = Graph(spec)
        self.store = store
        self.tables = tables
        self.cluster = cluster
        self.observer = observer or Observer()
        self.faults = faults
        self.metrics = metrics or RunMetrics(spec.name)
        self.clock = clock
        self.startup_timeout_s = startup_timeout_s
        self.stall_timeout_s = stall_timeout_s
        self.resume = resume
        self.resume_epoch = resume_epoch
        self.sample_every = sample_every
        self.should_stop = should_stop  # polled every turn: a reason to stop, or None
        self.commands = commands        # the command log (ZooKeeper): decisions are written here first
        self.compact_every = compact_every
        self.follower: Follower | None = None
        self.log_znodes_max = 0
        self.heartbeat_losses = 0
        self._appended = 0
        self._crash = CrashPoint.from_env()
        self.buffer_samples: list[dict[str, Any]] = []
        self.ckpt = CheckpointManager(spec, self.graph, store, tables, pointer, self.metrics, clock)
        self.owner = f"coordinator-{uuid.uuid4().hex[:8]}"
        self.workers: list[WorkerId] = []
        self.placement: dict[Channel, WorkerId] = {}
        self.committed = 0          # every task of every step <= committed is done, and it is released
        self.released = 0           # GT_last of the barrier (> committed only right after a rollback)
        self.triggered = 0
        self.outstanding: dict[str, Task] = {}
        self.avail: dict[Channel, tuple[int, int, bool]] = {}
        self.next_offsets: dict[Channel, int] = {}
        self.recoveries: list[RecoveryRecord] = []
        self._clients: dict[WorkerId, SidecarClient] = {}
        self._joining: list[WorkerId] = []
        self._newcomers: list[WorkerId] = []
        self._spawned = 0
        self._last_progress = 0.0
        self._started_at = 0.0
        self._source_rows = 0
        self._awaiting_commit: list[RecoveryRecord] = []
        self._replacements: list[tuple[float, int]] = []  # (not before, committed step at the loss)
        self.restarts = RestartBudget(RestartPolicy(
            spec.restart_max, spec.restart_window_s, spec.backoff_initial_ms, spec.backoff_max_ms,
            spec.backoff_jitter_percent))
        self._tasks_by_worker: dict[str, int] = {}
        self._joins: list[dict[str, Any]] = []
        self._replays: set[int] = set()
        self._checked_log_for = -1
        self._exhausted = False
        self._force_step = False
        self._step_started: dict[int, float] = {}
        self._step_rows: dict[int, int] = {}
        self._done_in_step: dict[int, int] = {}
        self._step_seconds: list[float] = []
        self._commit_at: list[float] = []
        self._replay_until = 0        # steps up to this one are re-run after a rollback
        self._recomputed_rows = 0     # rows read again by recovery: re-run tasks and replayed steps

    # --- workers -----------------------------------------------------------
    def _spawn(self) -> WorkerId:
        worker = WorkerId(f"w{self._spawned}")
        self._spawned += 1
        self.cluster.start_worker(worker)
        self._joining.append(worker)
        return worker

    def client(self, worker: WorkerId) -> SidecarClient:
        c = self._clients.get(worker)
        if c is None:
            address = self.store.address(worker)
            if address is None:
                raise PipelineFailed(f"worker {worker} has not registered an address")
            c = self._clients[worker] = SidecarClient(address)
        return c

    def _config(self) -> dict[str, Any]:
        return {"spec": self.spec.source_text, "base_dir": str(self.spec.base_dir), "committed": self.committed}

    def _start(self) -> None:
        initial = [self._spawn() for _ in range(self.spec.workers)]
        self.observer.on_workers_starting(initial)
        deadline = self.clock() + self.startup_timeout_s
        joined: list[WorkerId] = []
        while len(joined) < len(initial):
            if self.clock() > deadline:
                raise PipelineFailed(f"workers did not start within {self.startup_timeout_s:.0f}s "
                                     f"(joined: {', '.join(joined) or 'none'})")
            for event in self.store.receive(0.05):
                if event["t"] == "joined" and event["w"] in initial and event["w"] not in joined:
                    joined.append(event["w"])
                    self.observer.on_worker_joined(event["w"], len(joined), len(initial))
            for lost in self.cluster.lost():
                raise PipelineFailed(f"worker {lost} exited during start-up; see its logs")
            self._check_stop()
        self._joining = []
        self.workers = sorted(initial)
        for w in self.workers:
            self.tables.admit(w)
        self.placement = initial_placement(self.graph.channels(), self.workers)
        self.tables.set_placement(self.placement)
        decision = startup_decision({w: self.client(w).call("state") for w in self.workers})
        if isinstance(decision, Create):
            if decision.shutdown_first:
                raise PipelineFailed(f"workers {', '.join(decision.shutdown_first)} are not fresh; a fresh run needs fresh workers")
            for w in self.workers:
                self.client(w).call("create", self._config())
        if self.resume:
            self._open_newest_common_checkpoint()
        self.metrics.workers_ready.set(len(self.workers))

    def _open_newest_common_checkpoint(self) -> None:
        """Feldera's start-up: open the largest checkpoint step every worker has (or start fresh)."""
        common = set.intersection(*(set(self.client(w).call("checkpoints")) for w in self.workers))
        if self.resume_epoch is not None:
            if self.resume_epoch not in common:
                raise PipelineFailed(f"checkpoint {self.resume_epoch} is not available to every worker "
                                     f"(common: {sorted(common) or 'none'})")
            common = {self.resume_epoch}
        if not common:
            log.info("no common checkpoint: starting from the beginning")
            self._append("resumed", epoch=self._next_epoch(), boundary=0)
            return
        manifest = self.ckpt.storage.manifest(max(common))
        assert manifest is not None
        # the resume point is what the workers have, which the log may not know yet (killed between
        # the checkpoint's commit and its command): the log says where this run really restarts
        self._append("resumed", epoch=self._next_epoch(), boundary=int(manifest["boundary"]))
        gt_last = int(self.client(self.workers[0]).call("barrier")["gt_last"])
        view = self.tables.snapshot(self.workers)
        record = rollback(self.graph, self.tables, self.store, view, None, self.placement, {}, self.workers,
                          self._next_epoch(), manifest, gt_last, self.clients_for(self.workers),
                          self.clock(), self.clock)
        self._restart_at(record, manifest, gt_last)
        self.ckpt.last = manifest
        log.info("resumed", extra={"epoch": manifest["epoch"], "boundary": manifest["boundary"], "gt_last": gt_last})

    def _admit_newcomer(self, worker: WorkerId) -> None:
        self._joining.remove(worker)
        self.tables.admit(worker)
        self.client(worker).call("create", self._config())
        self.workers = sorted([*self.workers, worker])
        self._newcomers.append(worker)
        self._joins.append({"worker": worker, "committed": self.committed})
        self.metrics.workers_ready.set(len(self.workers))
        self.observer.on_worker_joined(worker, len(self.workers), len(self.workers))

    def _hand_back(self) -> None:
        if self.ckpt.busy:  # a worker joining mid-checkpoint would unbalance its deficit counts
            return
        for worker in self._newcomers:
            others = [w for w in self.workers if w != worker]
            self.placement, moves = hand_back(self.placement, worker, others, self.graph.is_stateful)
            self.tables.set_placement(moves)
            log.info("hand back", extra={"worker": worker, "channels": sorted(c.key() for c in moves)})
        self._newcomers = []

    def _schedule_replacement(self, now: float) -> None:
        """Ration replacements (restart budget, backoff); the run fails once the budget is spent."""
        try:
            delay = self.restarts.on_loss(now)
        except BudgetExhausted as exc:
            raise PipelineFailed(str(exc)) from exc
        self._replacements.append((now + delay, self.committed))

    def _start_replacements(self) -> None:
        """Start each replacement whose backoff has passed, once a step committed since its loss
        (so a new JVM does not compete with the survivors while they recover)."""
        now = self.clock()
        due = [r for r in self._replacements if r[0] <= now and self.committed > r[1]]
        for r in due:
            self._replacements.remove(r)
            log.info("starting replacement", extra={"worker": self._spawn()})

    def clients_for(self, workers: list[WorkerId]) -> dict[WorkerId, SidecarClient]:
        return {w: self.client(w) for w in workers}

    # --- events ------------------------------------------------------------
    def _poll(self, timeout_s: float) -> None:
        for event in self.store.receive(timeout_s):
            self._handle(event)
        for dead in self.cluster.lost():
            self._lost(dead, "gone")
        self._follow()
        f = self.faults
        if f is not None and f.due(self.triggered, self._done_in_step.get(f.at_step or 0, 0),
                                   self.clock() - self._started_at, self.ckpt.busy):
            victim = f.victim(self.workers)
            if f.action == "kill":
                f.fired = True
                log.warning("fault injection: killing worker", extra={"worker": victim, "step": self.triggered})
                self.cluster.kill_worker(victim)
            elif self._busy(victim):  # stop it while it runs a task, so a zombie has something to commit
                f.fired = True
                log.warning("fault injection: stopping worker", extra={"worker": victim, "step": self.triggered,
                                                                       "zombie": f.action == "zombie"})
                self.cluster.pause_worker(victim, zombie=f.action == "zombie")

    def _busy(self, worker: WorkerId) -> bool:
        try:
            return int(self.client(worker).call("stats", timeout_s=2).get("running", 0)) > 0
        except Exception:
            return False

    # --- the command log ------------------------------------------------------
    def _append(self, kind: str, **body: Any) -> None:
        if self.commands is not None:
            self.commands.append(kind, **body)
            self._appended += 1
            self.metrics.log_commands.labels(self.spec.name, kind).inc()
            if self._crash is not None:
                self._crash.after(kind)

    def _next_epoch(self) -> int:
        logged = self.follower.state.epoch if self.follower is not None else 0
        return max(self.tables.epoch(), logged) + 1

    def _open_log(self) -> None:
        """Start (or continue) the run in the command log: a new run epoch, and on a resume the offsets
        of the steps after the resume point from the log, so they re-run exactly as they were started
        (the step log in Redis may be gone: a private Redis keeps nothing)."""
        if self.commands is None:
            return
        self.follower = Follower(self.commands)
        before = self.follower.state
        epoch = max(before.epoch, self.tables.epoch()) + (1 if self.resume else 0)
        self._append("run-started", run_epoch=before.run_epoch + 1, epoch=epoch, fresh=not self.resume)
        for step, offsets in sorted(before.started.items()) if self.resume else ():
            recorded = self.store.step(step)
            logged = {Channel.parse(c): (lo, hi) for c, (lo, hi) in offsets.items()}
            if recorded is None or recorded.offsets != logged:
                self.store.record_step(StepRecord(step, logged, Reason.REPLAY.value))
        self.follower.refresh()
        log.info("command log opened", extra={"run_epoch": before.run_epoch + 1, "epoch": epoch,
                                              "committed": before.committed, "seq": self.follower.state.seq})

    def _follow(self) -> None:
        """Deaths reported in the command log (a ring member saw a heartbeat expire) are losses too:
        a worker that hangs or is cut off is recovered like one whose pod was deleted."""
        if self.follower is None:
            return
        if self.follower.changed.is_set():
            for cmd, before in self.follower.refresh():
                if cmd.kind != "leave" or cmd.get("by") == "coordinator":
                    continue
                worker = WorkerId(str(before.members.get(str(cmd.get("peer"))) or ""))
                if worker in self.workers:
                    log.warning("worker declared dead in the command log",
                                extra={"worker": worker, "by": cmd.get("by"), "reason": cmd.get("reason")})
                    self.heartbeat_losses += 1
                    self.metrics.heartbeat_losses.inc()
                    self.cluster.declare_lost(worker, f"reported by {cmd.get('by')}: {cmd.get('reason')}")
                    self.cluster.kill_worker(worker)  # make sure: a hung pod or process must not linger
                    self._lost(worker, "heartbeat expired")
        if self.commands is not None and self._appended >= self.compact_every:
            self._appended = 0
            self.follower.refresh()
            znodes = self.commands.znodes()
            self.log_znodes_max = max(self.log_znodes_max, znodes)
            self.metrics.log_znodes.set(znodes)
            self.commands.compact(self.follower.state)

    def _handle(self, event: dict[str, Any]) -> None:
        kind = event["t"]
        if kind == "done":
            task = self.outstanding.pop(event["id"], None)
            if task is not None:
                self._tasks_by_worker[event["w"]] = self._tasks_by_worker.get(event["w"], 0) + 1
                self._last_progress = self.clock()
                self._done_in_step[task.step] = self._done_in_step.get(task.step, 0) + 1
                if event["recovery"] or task.step <= self._replay_until:
                    self.metrics.replayed.inc(event["rows_in"])
                    self._recomputed_rows += event["rows_in"]
                elif event["kind"] == "source":
                    self._source_rows += event["rows_in"]
                    self.metrics.source_rows.inc(event["rows_in"])
        elif kind == "failed":
            raise PipelineFailed(f"task {event['id']} failed on worker {event['w']}: {event['error']}")
        elif kind == "received":
            self.avail[Channel.parse(event["ch"])] = (event["start"], event["n"], event["exhausted"])
        elif kind == "replay":
            self._replays.add(int(event["step"]))
        elif kind in ("checkpointed", "inflight"):
            self.ckpt.on_event(event)
        elif kind == "joined" and event["w"] in self._joining:
            self._admit_newcomer(WorkerId(event["w"]))

    def _lost(self, dead: WorkerId, reason: str = "") -> None:
        detected = self.clock()
        if dead not in self.workers and dead not in self._joining:
            return  # already handled: a loss can be seen twice (heartbeat expiry, then the process/pod)
        if self.follower is not None and reason != "heartbeat expired":
            peer = self.follower.state.peer_of(dead)
            if peer is not None:  # close the ring around it now rather than after its session times out
                self._append("leave", peer=peer, worker=dead, by="coordinator", reason=reason or "gone")
        if dead in self._joining:  # a replacement that died before joining: try again, after a backoff
            self._joining.remove(dead)
            self._schedule_replacement(detected)
            return
        self.observer.on_worker_lost(dead)
        if not self.spec.fault_tolerance:
            raise PipelineFailed(f"worker {dead} was lost and spec.faultTolerance is false: nothing to recover from")
        survivors = [w for w in self.workers if w != dead]
        if not survivors:
            raise PipelineFailed(f"worker {dead} was lost and no worker survives")
        self.ckpt.abort(f"worker {dead} lost")
        self._clients.pop(dead, None)
        self._newcomers = [w for w in self._newcomers if w != dead]
        epoch = self._next_epoch()
        manifest = self.ckpt.last
        clients = self.clients_for(survivors)
        self.tables.lock_exclusive(self.owner)
        strategy = "unknown"
        try:
            view = self.tables.snapshot([*survivors, dead])
            strategy = choose_strategy(self.spec.recovery_strategy, self.graph, view, dead, manifest)
            self._append("recovery", epoch=epoch, lost=dead, strategy=strategy,  # write-ahead
                         boundary=(manifest or {}).get("boundary", 0) if strategy == "checkpoint" else None)
            record = None
            if strategy == "lineage":
                try:
                    record = recover_lineage(self.graph, self.tables, view, dead, survivors, epoch, manifest,
                                             clients, detected, self.clock)
                except PlanningError as exc:  # the tables allow no lineage plan: roll back instead
                    log.warning("lineage plan impossible; rolling back to the newest checkpoint",
                                extra={"worker": dead, "error": str(exc)})
            if record is not None:
                self.outstanding = {i: t for i, t in self.outstanding.items() if i not in record.replaced}
                self.outstanding.update({t.id: t for _, t in record.tasks})
            else:
                if strategy != "checkpoint":  # the lineage plan was impossible: the log says so first
                    self._append("recovery", epoch=epoch, lost=dead, strategy="checkpoint",
                                 boundary=(manifest or {}).get("boundary", 0))
                placement, moves = adopt(self.placement, dead, survivors, self.graph.is_stateful)
                record = rollback(self.graph, self.tables, self.store, view, dead, placement, moves, survivors,
                                  epoch, manifest, self.released, clients, detected, self.clock)
                self._restart_at(record, manifest, self.released)
        except Exception:
            self.metrics.recoveries.labels(self.spec.name, strategy, "failed").inc()
            raise
        finally:
            self.tables.unlock_exclusive(self.owner)
        for worker, client in clients.items():
            try:
                client.call("wake", timeout_s=5)
            except Exception as exc:  # a survivor dying now is the next failure
                log.warning("wake failed", extra={"worker": worker, "error": str(exc)})
        record.seconds = self.clock() - detected
        self.placement = dict(record.placement)
        self.workers = survivors
        self._awaiting_commit.append(record)
        self.recoveries.append(record)
        self.store.record_recovery(record.summary())
        self.metrics.recoveries.labels(self.spec.name, record.strategy, "applied").inc()
        self.metrics.recovery_seconds.labels(self.spec.name, record.strategy).observe(record.seconds)
        self.metrics.workers_ready.set(len(self.workers))
        self.observer.on_recovery(record)
        self._schedule_replacement(detected)
        self._last_progress = self.clock()
        log.info("recovered", extra=record.summary())

    def _restart_at(self, record: RecoveryRecord, manifest: dict[str, Any] | None, gt_last: int) -> None:
        """After a rollback: progress is the cut's boundary; later steps replay from the step log."""
        boundary = record.boundary or 0
        self._replay_until = max(self._replay_until, self.triggered)
        self.outstanding = {t.id: t for _, t in record.tasks}
        self.committed = self.triggered = boundary
        self.released = max(gt_last, boundary)
        offsets = (manifest or {}).get("offsets", {})
        self.next_offsets = {Channel.parse(c): int(v) for c, v in offsets.items()}
        self.store.set_offsets(self.next_offsets)
        self.avail.clear()
        self._checked_log_for = -1
        # messages carry the reopened cut's epoch until the next checkpoint, which gets a fresh number
        self.ckpt.restored(int(manifest["epoch"]) if manifest else 0)

    # --- steps -------------------------------------------------------------
    def _plan_offsets(self) -> tuple[dict[Channel, tuple[int, int]], bool, bool]:
        """Offsets of the next step; (offsets, every channel reported, input exhausted)."""
        offsets: dict[Channel, tuple[int, int]] = {}
        reported, exhausted = True, True
        for stage in self.graph.sources():
            share_total = rows_per_step(stage)
            for i in range(stage.parallelism):
                ch = Channel(stage.name, i)
                start = self.next_offsets.get(ch, 0)
                share = channel_share(share_total, stage.parallelism, i)
                if stage.generator is not None:
                    offsets[ch] = (start, start + share)
                    exhausted = False
                    continue
                seen = self.avail.get(ch)
                if seen is None or seen[0] != start:
                    reported, exhausted = False, False
                    offsets[ch] = (start, start)
                    continue
                n = share if seen[1] < 0 else min(seen[1], share)
                offsets[ch] = (start, start + n)
                exhausted = exhausted and seen[2] and n == 0
        return offsets, reported, exhausted

    def _maybe_trigger(self, trigger: StepTrigger) -> None:
        if self.triggered - self.committed >= self.spec.window:
            return
        if self.spec.max_steps is not None and self.triggered >= self.spec.max_steps:
            return
        step = self.triggered + 1
        if self.ckpt.due(self.triggered):
            if self.ckpt.needs_settle and (self.triggered != self.committed or self.outstanding):
                return  # drain before an epoch that follows a loss
            self._begin_checkpoint()
        if self._checked_log_for != step or step in self._replays:
            self._checked_log_for = step
            self._replays.discard(step)
            recorded = self.store.step(step)
            if recorded is not None:  # the step log has it: re-run with exactly those offsets
                trigger.replay(True)
                self._trigger(trigger, step, Reason.REPLAY, recorded.offsets)
                return
        offsets, reported, exhausted = self._plan_offsets()
        self._exhausted = reported and exhausted
        if self._exhausted or not reported:
            return
        now = self.clock()
        trigger.received(sum(hi - lo for lo, hi in offsets.values()), now)
        reason = trigger.due(now)
        if reason is None and self._force_step:
            reason = Reason.CHECKPOINT
        if reason is not None:
            self._trigger(trigger, step, reason, offsets)

    def _begin_checkpoint(self) -> None:
        settle = self.ckpt.needs_settle
        epoch = self.ckpt.begin(self.triggered, self.workers)
        for w in self.workers:
            self.client(w).call("checkpoint", {"epoch": epoch, "settle": settle})
        self.ckpt.settled()
        self._force_step = True

    def _trigger(self, trigger: StepTrigger, step: int, reason: Reason, offsets: dict[Channel, tuple[int, int]]) -> None:
        now = self.clock()
        self._append("step-started", step=step, offsets={c.key(): list(o) for c, o in offsets.items()})
        self.store.record_step(StepRecord(step, offsets, reason.value))  # before the step runs
        for ch, (_, hi) in offsets.items():
            self.next_offsets[ch] = hi
        self.triggered = step
        self._force_step = False
        epoch = self.ckpt.epoch
        tasks = [replace(t, ckpt=epoch) if t.kind is TaskKind.SOURCE else t for t in self.graph.step_tasks(step, offsets)]
        self.tables.assign([(self.placement[t.ref], t) for t in tasks])
        self.outstanding.update({t.id: t for t in tasks})
        rows = sum(hi - lo for lo, hi in offsets.values())
        self._step_started[step], self._step_rows[step] = now, rows
        trigger.stepped(now)
        self.metrics.current.set(step)
        self.metrics.triggers.labels(self.spec.name, reason.value).inc()
        self.observer.on_step_started(step, reason, rows)
        for w in list(self.workers):
            try:
                self.client(w).call("step", {"step": step})
            except Exception as exc:  # a worker dying right now is found by the cluster backend
                log.warning("step call failed", extra={"worker": w, "error": str(exc)})
        if not self.outstanding or self._last_progress < now - 1:
            self._last_progress = now

    def _release(self, step: int) -> None:
        for w in list(self.workers):
            try:
                self.client(w).call("release", {"step": step})
                return
            except Exception as exc:  # release is idempotent: another worker can do it
                log.warning("release failed", extra={"worker": w, "error": str(exc)})
        raise PipelineFailed(f"no worker could release step {step}")

    def _commit_ready(self) -> None:
        while self.committed < self.triggered:
            step = self.committed + 1
            if any(t.step <= step for t in self.outstanding.values()):
                return
            self._append("step-committed", step=step)  # decided: a restart re-releases it if need be
            if step > self.released:
                self._release(step)
                self.released = step
            self.store.commit(step)
            self.committed = step
            now = self.clock()
            elapsed = now - self._step_started.pop(step, now)
            self._step_seconds.append(elapsed)
            self._commit_at.append(now - self._started_at)
            for record in self._awaiting_commit:
                record.to_commit_seconds = now - record.detected_at
                self.metrics.recovery_to_commit.observe(record.to_commit_seconds)
            self._awaiting_commit = []
            self.metrics.steps.inc()
            self.metrics.committed.set(step)
            self.metrics.step_seconds.observe(elapsed)
            self.observer.on_step_committed(step, self._step_rows.pop(step, 0), elapsed)
            self.ckpt.released(step)
            self._hand_back()
            if self.sample_every and step % self.sample_every == 0:
                self._sample_buffers(step)

    def _sample_buffers(self, step: int) -> None:
        """Bytes each worker holds in its object buffer (bounded by GC and checkpoints)."""
        sample: dict[str, Any] = {"step": step}
        for w in list(self.workers):
            try:
                sample[w] = int(self.client(w).call("stats", timeout_s=5)["held_bytes"])
            except Exception:  # a worker dying now is handled as a loss
                continue
        self.buffer_samples.append(sample)

    def _checkpoint_tick(self) -> None:
        manifest = self.ckpt.try_commit(self.released)
        if manifest is not None:
            self._append("checkpoint-committed", epoch=int(manifest["epoch"]), boundary=int(manifest["boundary"]))
            self.metrics.checkpoint_step.set(manifest["boundary"])
            self.observer.on_checkpoint(self.ckpt.history[-1])
        age = self.ckpt.age()
        if age is not None:
            self.metrics.checkpoint_age.set(age)

    def _finished(self) -> bool:
        if self.spec.max_steps is not None and self.committed >= self.spec.max_steps:
            return True
        return self._exhausted and self.triggered == self.committed and not self.outstanding

    def run(self) -> RunResult:
        self._started_at = self.clock()
        self._open_log()
        self._start()
        trigger = StepTrigger(self.spec.trigger.records, self.spec.trigger.timer_ms, self.spec.trigger.tick_ms)
        trigger.start(self.clock())
        self._last_progress = self.clock()
        while True:
            self._poll(0.005)
            self._check_stop()
            self._commit_ready()
            self._start_replacements()
            self._checkpoint_tick()
            if self._finished():
                break
            self._maybe_trigger(trigger)
            if self.outstanding and self.clock() - self._last_progress > self.stall_timeout_s:
                pending = ", ".join(sorted(self.outstanding)[:10])
                raise PipelineFailed(f"no progress for {self.stall_timeout_s:.0f}s; pending: {pending}")
        return RunResult(
            committed=self.committed,
            source_rows=self._source_rows,
            seconds=self.clock() - self._started_at,
            recoveries=self.recoveries,
            stats={**self.store.stats(), "recomputed_rows": self._recomputed_rows,
                   "heartbeat_losses": self.heartbeat_losses, "log_znodes_max": self.log_znodes_max},
            step_seconds=self._step_seconds,
            tasks_by_worker=dict(self._tasks_by_worker),
            joins=list(self._joins),
            checkpoints=list(self.ckpt.history),
            buffers=list(self.buffer_samples),
            commit_at=list(self._commit_at),
        )

    def _check_stop(self) -> None:
        reason = self.should_stop() if self.should_stop is not None else None
        if reason:
            self._append("suspended", reason=reason)
            raise Interrupted(reason)

    def shutdown(self) -> None:
        for w in self.workers:
            try:
                self.client(w).call("shutdown", timeout_s=2)
            except Exception:  # best effort: the backend stops processes anyway
                pass
        for c in self._clients.values():
            c.close()
