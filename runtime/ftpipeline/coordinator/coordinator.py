"""The coordinator: lockstep steps, and lineage recovery when a worker is lost.

One loop, one thread, so every decision is taken in a definite order:

    STARTING --all workers joined, Create/Resume--> IDLE
    IDLE     --trigger reason--> RUNNING(S)    (offsets recorded *before* step(S))
    RUNNING(S) --every task of S (and of recovery) done--> COMMITTING(S)
    COMMITTING(S) --barrier released S--> IDLE  (committed = S)
    any      --worker lost--> RECOVERING --plan applied--> back where it was
    any      --task failed / no survivor / stalled--> FAILED
    IDLE     --max steps reached or input exhausted--> DONE

A lost worker does not stop the step in flight: survivors keep running what
they have, the plan's tasks are added to their NTTs, and the step commits
when the re-run work is done. A replacement worker is not waited for: it is
started once the step in flight has committed (so its JVM start does not
slow the survivors down); when it joins it is created and, at the next step
boundary, takes stateless channels back.

The cluster backend (``cluster.base``) is the only thing that differs between
``ftpipeline run`` and the Kubernetes operator.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ftpipeline.cluster.base import ClusterBackend
from ftpipeline.control.store import RunStore, StepRecord
from ftpipeline.coordinator.faults import FaultPlan
from ftpipeline.coordinator.protocol import Create, startup_decision
from ftpipeline.coordinator.recovery import RecoveryRecord, recover
from ftpipeline.coordinator.trigger import Reason, StepTrigger
from ftpipeline.dataflow.graph import Graph
from ftpipeline.dataflow.sources import channel_share, rows_per_step
from ftpipeline.lineage.naming import Channel, Task, WorkerId
from ftpipeline.lineage.placement import hand_back, initial_placement
from ftpipeline.lineage.tables import LineageTables
from ftpipeline.obs.metrics import RunMetrics
from ftpipeline.spec.model import PipelineSpec
from ftpipeline.worker.transport import SidecarClient

log = logging.getLogger("ftpipeline.coordinator")


class PipelineFailed(RuntimeError):
    """The run cannot continue; the message says why, naming the task or worker."""


class Observer:
    """Receives progress events (the CLI draws them; the operator turns them into status)."""

    def on_workers_starting(self, workers: list[WorkerId]) -> None: ...
    def on_worker_joined(self, worker: WorkerId, ready: int, total: int) -> None: ...
    def on_step_started(self, step: int, reason: Reason, rows: int) -> None: ...
    def on_step_committed(self, step: int, rows: int, seconds: float) -> None: ...
    def on_worker_lost(self, worker: WorkerId) -> None: ...
    def on_recovery(self, record: RecoveryRecord) -> None: ...


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
        self.owner = f"coordinator-{uuid.uuid4().hex[:8]}"
        self.workers: list[WorkerId] = []
        self.placement: dict[Channel, WorkerId] = {}
        self.committed = 0
        self.outstanding: dict[str, Task] = {}
        self.avail: dict[Channel, tuple[int, int, bool]] = {}
        self.next_offsets: dict[Channel, int] = {}
        self.recoveries: list[RecoveryRecord] = []
        self._clients: dict[WorkerId, SidecarClient] = {}
        self._joining: list[WorkerId] = []
        self._newcomers: list[WorkerId] = []
        self._spawned = 0
        self._done_in_step = 0
        self._last_progress = 0.0
        self._started_at = 0.0
        self._source_rows = 0
        self._awaiting_commit: list[RecoveryRecord] = []
        self._replacements_due = 0
        self._tasks_by_worker: dict[str, int] = {}
        self._joins: list[dict[str, Any]] = []
        self._replays: set[int] = set()

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
        self.metrics.workers_ready.set(len(self.workers))

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
        for worker in self._newcomers:
            others = [w for w in self.workers if w != worker]
            self.placement, moves = hand_back(self.placement, worker, others, self.graph.is_stateful)
            self.tables.set_placement(moves)
            log.info("hand back", extra={"worker": worker, "channels": sorted(c.key() for c in moves)})
        self._newcomers = []

    # --- events ------------------------------------------------------------
    def _poll(self, timeout_s: float) -> None:
        for event in self.store.receive(timeout_s):
            self._handle(event)
        for dead in self.cluster.lost():
            self._lost(dead)
        if self.faults is not None and self.faults.due(self.committed + 1, self._done_in_step, self.clock() - self._started_at):
            victim = self.faults.victim(self.workers)
            self.faults.fired = True
            log.warning("fault injection: killing worker", extra={"worker": victim, "step": self.committed + 1})
            self.cluster.kill_worker(victim)

    def _handle(self, event: dict[str, Any]) -> None:
        kind = event["t"]
        if kind == "done":
            task = self.outstanding.pop(event["id"], None)
            if task is not None:
                self._tasks_by_worker[event["w"]] = self._tasks_by_worker.get(event["w"], 0) + 1
                self._last_progress = self.clock()
                if not event["recovery"] and event["step"] == self.committed + 1:
                    self._done_in_step += 1
                if event["recovery"]:
                    self.metrics.replayed.inc(event["rows_in"])
                elif event["kind"] == "source":
                    self._source_rows += event["rows_in"]
                    self.metrics.source_rows.inc(event["rows_in"])
        elif kind == "failed":
            raise PipelineFailed(f"task {event['id']} failed on worker {event['w']}: {event['error']}")
        elif kind == "received":
            self.avail[Channel.parse(event["ch"])] = (event["start"], event["n"], event["exhausted"])
        elif kind == "replay":
            self._replays.add(int(event["step"]))
        elif kind == "joined" and event["w"] in self._joining:
            self._admit_newcomer(WorkerId(event["w"]))

    def _lost(self, dead: WorkerId) -> None:
        detected = self.clock()
        if dead in self._joining:  # a replacement that died before joining: try again
            self._joining.remove(dead)
            self._spawn()
            return
        self.observer.on_worker_lost(dead)
        if not self.spec.fault_tolerance:
            raise PipelineFailed(f"worker {dead} was lost and spec.faultTolerance is false: nothing to recover from")
        survivors = [w for w in self.workers if w != dead]
        if not survivors:
            raise PipelineFailed(f"worker {dead} was lost and no worker survives")
        record = recover(self.graph, self.tables, dead, survivors, self.owner, self.clients_for(survivors), self.clock)
        self.outstanding = {i: t for i, t in self.outstanding.items() if i not in record.plan.replaced}
        self.outstanding.update({t.id: t for _, t in record.plan.tasks})
        self.placement = dict(record.plan.placement)
        self.workers = survivors
        self._clients.pop(dead, None)
        record.detected_at = detected
        self._awaiting_commit.append(record)
        self.recoveries.append(record)
        self.store.record_recovery(record.summary())
        self.metrics.recoveries.labels(self.spec.name, record.strategy, "applied").inc()
        self.metrics.recovery_seconds.labels(self.spec.name, record.strategy).observe(record.seconds)
        self.metrics.workers_ready.set(len(self.workers))
        self.observer.on_recovery(record)
        self._replacements_due += 1
        log.info("recovered", extra=record.summary())

    def clients_for(self, workers: list[WorkerId]) -> dict[WorkerId, SidecarClient]:
        return {w: self.client(w) for w in workers}

    def _start_replacements(self) -> None:
        """Start replacements for lost workers once the recovery's step has committed.

        Never before: a JVM starting on the same machine would take CPU from
        the survivors' recovery work, and progress must not wait for it anyway.
        """
        while self._replacements_due:
            self._replacements_due -= 1
            log.info("starting replacement", extra={"worker": self._spawn()})

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

    def _await_trigger(self, trigger: StepTrigger) -> tuple[Reason, dict[Channel, tuple[int, int]]] | None:
        step = self.committed + 1
        check_log = True  # at the start, and whenever a worker reports replay(step)
        while True:
            if check_log or step in self._replays:
                self._replays.discard(step)
                check_log = False
                recorded = self.store.step(step)
                trigger.replay(recorded is not None)
                if recorded is not None:  # the step log has it: re-run with exactly those offsets
                    return Reason.REPLAY, recorded.offsets
            offsets, reported, exhausted = self._plan_offsets()
            if reported and exhausted:
                return None
            now = self.clock()
            trigger.received(sum(hi - lo for lo, hi in offsets.values()) if reported else 0, now)
            reason = trigger.due(now)
            if reason is not None and reported:
                return reason, offsets
            self._poll(0.01)

    def _run_step(self, step: int, reason: Reason, offsets: dict[Channel, tuple[int, int]]) -> None:
        self.store.record_step(StepRecord(step, offsets, reason.value))  # before the step runs
        for ch, (_, hi) in offsets.items():
            self.next_offsets[ch] = hi
        tasks = self.graph.step_tasks(step, offsets)
        self.tables.assign([(self.placement[t.ref], t) for t in tasks])
        self.outstanding.update({t.id: t for t in tasks})
        self._done_in_step = 0
        self.metrics.current.set(step)
        self.metrics.triggers.labels(self.spec.name, reason.value).inc()
        self.observer.on_step_started(step, reason, sum(hi - lo for lo, hi in offsets.values()))
        for w in list(self.workers):
            try:
                self.client(w).call("step", {"step": step})
            except Exception as exc:  # a worker dying right now is found by the cluster backend
                log.warning("step call failed", extra={"worker": w, "error": str(exc)})
        self._last_progress = self.clock()
        while self.outstanding:
            self._poll(0.02)
            if self.clock() - self._last_progress > self.stall_timeout_s:
                pending = ", ".join(sorted(self.outstanding)[:10])
                raise PipelineFailed(f"step {step} made no progress for {self.stall_timeout_s:.0f}s; pending: {pending}")

    def _commit(self, step: int) -> None:
        for w in list(self.workers):
            try:
                self.client(w).call("release", {"step": step})
                break
            except Exception as exc:  # release is idempotent: another worker can do it
                log.warning("release failed", extra={"worker": w, "error": str(exc)})
                self._poll(0.0)
        else:
            raise PipelineFailed(f"no worker could release step {step}")
        self.store.commit(step)
        self.committed = step

    def run(self) -> RunResult:
        self._started_at = self.clock()
        self._start()
        trigger = StepTrigger(self.spec.trigger.records, self.spec.trigger.timer_ms, self.spec.trigger.tick_ms)
        trigger.start(self.clock())
        step_seconds: list[float] = []
        while self.spec.max_steps is None or self.committed < self.spec.max_steps:
            decided = self._await_trigger(trigger)
            if decided is None:
                break
            reason, offsets = decided
            step = self.committed + 1
            started = self.clock()
            trigger.stepped(started)
            self._run_step(step, reason, offsets)
            self._commit(step)
            elapsed = self.clock() - started
            step_seconds.append(elapsed)
            for record in self._awaiting_commit:
                record.to_commit_seconds = self.clock() - record.detected_at
                self.metrics.recovery_to_commit.observe(record.to_commit_seconds)
            self._awaiting_commit = []
            self.metrics.steps.inc()
            self.metrics.committed.set(step)
            self.metrics.step_seconds.observe(elapsed)
            self.observer.on_step_committed(step, sum(hi - lo for lo, hi in offsets.values()), elapsed)
            self._hand_back()
            self._start_replacements()
        return RunResult(
            committed=self.committed,
            source_rows=self._source_rows,
            seconds=self.clock() - self._started_at,
            recoveries=self.recoveries,
            stats=self.store.stats(),
            step_seconds=step_seconds,
            tasks_by_worker=dict(self._tasks_by_worker),
            joins=list(self._joins),
        )

    def shutdown(self) -> None:
        for w in self.workers:
            try:
                self.client(w).call("shutdown", timeout_s=2)
            except Exception:  # best effort: the backend stops processes anyway
                pass
        for c in self._clients.values():
            c.close()
