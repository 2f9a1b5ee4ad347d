"""The runtime sidecar: buffer, transfers, lineage bookkeeping, checkpoints, control API.

The Spark process computes; everything about fault tolerance happens here,
in a separate process that never runs user code. It

- serves the coordinator's calls (Feldera's pipeline interface: ``state``,
  ``checkpoints``, ``adopt``, ``create``, ``open``, ``step``, ``checkpoint``, plus
  ``wake``; ``release`` is in ``outputs.py``, the checkpoint storage actions in
  ``checkpoint_files.py``) and the local Spark process's requests over one
  Arrow Flight server (``server.py``);
- pulls its tasks from its NTT (Quokka: "things in the NTT must be executed
  by the node"), hands the Spark process a task only when every input is
  readable locally (``inputs.py``). It looks again when something may have
  made one ready — new tasks (the coordinator's ``step`` and ``wake``), a
  completion here, or one announced by another worker (pub/sub,
  ``background.py``) — and otherwise only every ``SAFETY_POLL_S``; the
  ready tasks of one stage and step that run user functions are handed out
  together, for one Spark job (``dataflow/plans.py``'s ``run_many``), each
  still recorded as its own task;
- takes part in checkpoints (``epochs.py``): stamps vector clocks on outputs,
  asks the Spark process to snapshot its state before the first task of a
  newer epoch, saves in-flight inputs, reports deficits;
- records each completion atomically (outputs in PT/NOT/LT with their clock,
  inputs into the cemetery, the stateful channel's step) with one script;
- collects garbage and reports to the coordinator unasked (``background.py``);
- for fault-injection tests (``FTPIPELINE_CHAOS=seed,max_ms``), delivers
  messages late and out of order: the next ready task is drawn at random
  and handed out after a random delay;
- reports available source records (``received``) and a recorded but
  uncommitted next step (``replay``) to the coordinator.

States (what ``state()`` answers)::

    CLOSED  --create(config)-->  OPEN(n)      n = steps committed so far
    OPEN(n) --step(n+1)-->       RUNNING(n+1)
    RUNNING(s) --its NTT is empty--> OPEN(s)
    any     --open(checkpoint)--> OPENING --Spark process loaded the snapshots--> OPEN(boundary)
    any     --create(config)-->  OPEN(n)      (a fresh start discards the buffer)

Transitions happen only in :meth:`Sidecar._set_state`. Which stateful
channels have their state in this worker's Spark process, and at which step,
is tracked in ``_state_steps``: an aggregate task for step k is handed out
only when its channel is at k-1, so state is always folded in step order; a
channel adopted in recovery has no state until its ``rebuild`` ran.
"""

from __future__ import annotations

import enum
import hashlib
import json
import logging
import os
import random
import threading
import time
import zlib
from pathlib import Path
from typing import Any

from ftpipeline.checkpoint.clock import VectorClock
from ftpipeline.checkpoint.storage import CheckpointStorage
from ftpipeline.control.redisclient import connect as redis_connect
from ftpipeline.control.redisclient import watch as redis_watch
from ftpipeline.control.store import RunStore
from ftpipeline.dataflow.graph import Graph
from ftpipeline.dataflow.sources import SourceReader, make_reader
from ftpipeline.lineage.naming import Channel, Task, TaskKind, WorkerId
from ftpipeline.lineage.tables import Completion, LineageTables
from ftpipeline.obs.crash import CrashPoint
from ftpipeline.obs.errors import one_line
from ftpipeline.obs.metrics import WorkerMetrics
from ftpipeline.spec.load import for_user_code, worker_spec
from ftpipeline.spec.model import PipelineSpec, StageKind
from ftpipeline.worker.buffer import ObjectBuffer, ipc_bytes, read_ipc
from ftpipeline.worker.checkpoint_files import CheckpointFiles
from ftpipeline.worker.epochs import EpochKeeper
from ftpipeline.worker.inputs import InputResolver
from ftpipeline.worker.leaving import Leaving
from ftpipeline.worker.outputs import Outputs
from ftpipeline.worker.tls import Credentials

log = logging.getLogger("ftpipeline.sidecar")

SAFETY_POLL_S = 0.1  # how often a waiting next_task looks again with no announcement (one may be lost)


def config_digest(config: dict[str, Any]) -> str:
    """What a worker was created with, as one string (where the run stood at its creation aside): a
    coordinator takes a running worker over only if it would create it alike (``coordinator/admission.py``)."""
    kept = {k: v for k, v in config.items() if k != "committed"}
    return hashlib.sha256(json.dumps(kept, sort_keys=True, default=str).encode()).hexdigest()[:16]


class WorkerState(str, enum.Enum):
    CLOSED = "closed"
    OPENING = "opening"
    OPEN = "open"
    RUNNING = "running"


def _priority(graph: Graph, task: Task) -> tuple[int, int, int, int]:
    # rebuilds first (they unblock a channel), then older steps, then topological order
    return (0 if task.kind is TaskKind.REBUILD else 1, task.step, graph.rank(task.stage), task.channel)


def _groupable(graph: Graph, task: Task) -> bool:
    """May ``task`` share a Spark job with others (``Plans.run_many``)? A source or a transform whose
    chain runs user functions, not a recovery's."""
    return (task.kind in (TaskKind.SOURCE, TaskKind.TRANSFORM) and not task.recovery
            and any(m.kind is StageKind.TRANSFORM for m in graph.stage(task.stage).members))


def _groups_with(first: Task, task: Task) -> bool:
    """Is ``task`` of the same stage, step, epoch and kind as ``first`` (both ``_groupable``)?"""
    return (task.stage, task.step, task.epoch, task.kind, task.recovery) == (
        first.stage, first.step, first.epoch, first.kind, first.recovery)


class Sidecar:
    def __init__(self, worker: WorkerId, pipeline: str, redis_url: str, root: Path,
                 credentials: Credentials | None = None) -> None:
        self.worker = worker
        self.r = redis_connect(redis_url)
        redis_watch(self.r, lambda e: log.warning("Redis unreachable: waiting for it", extra={"error": str(e)}),
                    lambda: log.warning("Redis answers again"))
        self.tables = LineageTables(self.r, pipeline)
        self.store = RunStore(self.r, pipeline)
        self.buffer = ObjectBuffer(root)
        self.buffer.reset()
        self.inputs = InputResolver(worker, self.tables, self.store, self.buffer, credentials)
        self.files = CheckpointFiles(self.inputs)  # the storage actions: checkpoints, manifests, pruning
        self.address = ""
        self.metrics: WorkerMetrics | None = None
        self._cv = threading.Condition(threading.RLock())
        self._state = WorkerState.CLOSED
        self._step = 0
        self._config: dict[str, Any] | None = None
        self.spec: PipelineSpec | None = None
        self.graph: Graph | None = None
        self._readers: dict[str, SourceReader] = {}
        self._queue: dict[str, Task] = {}
        self._running: dict[str, list[str]] = {}  # task id -> cached input names
        self._record_s = 0.0  # the last completion's lineage write, seconds (obs/phases.py)
        self._state_steps: dict[Channel, int] = {}
        self._keeper = EpochKeeper(worker)
        self._deficits: dict[int, int] = {}       # checkpoint epoch -> deficit at this worker's checkpoint
        self._opening: dict[str, Any] | None = None
        self._joined = False
        self._last_refresh = 0.0
        self.stopping = threading.Event()
        self.leaving = Leaving(self)              # asked to go (SIGTERM): hands its channels over first
        self._ready = threading.Event()           # something may have made a queued task ready
        self.outputs = Outputs(worker, self.store, self.still_member)  # the sinks' barriers
        self._crash = CrashPoint.from_env(worker)  # tests: exit at a named point (obs/crash.py)
        self.fenced: str | None = None            # why this worker no longer belongs to the run (a zombie)
        self._refusals_told: set[str] = set()     # the kinds of refusal the coordinator heard of
        chaos = os.environ.get("FTPIPELINE_CHAOS")  # "seed,max delay ms": see _pick
        self._chaos = (random.Random(int(chaos.split(",")[0]) * 1000 + zlib.crc32(worker.encode()) % 1000),
                       int(chaos.split(",")[1]) / 1000) if chaos else None

    # --- states ------------------------------------------------------------
    def _set_state(self, state: WorkerState, step: int) -> None:
        if (state, step) != (self._state, self._step):
            log.info("state", extra={"worker": self.worker, "from": self._state.value, "to": state.value, "step": step})
        self._state, self._step = state, step

    @property
    def step(self) -> int:
        return self._step

    @property
    def is_open(self) -> bool:
        return self._state is WorkerState.OPEN

    @property
    def busy(self) -> bool:
        """Has the Spark process a task of this worker's in hand?"""
        return bool(self._running)

    @property
    def readers(self) -> dict[str, SourceReader]:
        return self._readers

    def wake_up(self) -> None:
        """Something may have made a queued task ready: a waiting ``next_task`` looks again now."""
        self._ready.set()

    def handle(self, action: str, body: dict[str, Any]) -> Any:
        handler = (getattr(self, f"_do_{action}", None) or getattr(self.files, f"_do_{action}", None)
                   or getattr(self.outputs, f"_do_{action}", None))
        if handler is None:
            raise KeyError(f"unknown action {action!r}")
        return handler(body)

    def owned(self) -> list[Channel]:
        return [ch for ch, w in self.tables.placement().items() if w == self.worker]

    # --- the coordinator's calls -------------------------------------------
    def _do_state(self, body: dict[str, Any]) -> dict[str, Any]:
        with self._cv:
            return {"state": self._state.value, "step": self._step, "worker": self.worker,
                    "epoch": self._keeper.clock.epoch,
                    "config": config_digest(self._config) if self._config is not None else None,
                    "fenced": self.fenced or ("stopping" if self.stopping.is_set() else None)}

    def _do_create(self, body: dict[str, Any]) -> dict[str, Any]:
        spec = worker_spec(body)
        graph = Graph.physical(spec)
        owned = self.owned()
        with self._cv:
            self.buffer.reset()
            self.spec, self.graph, self._config = spec, graph, dict(body)
            self.inputs.storage = CheckpointStorage(spec.checkpoint_root, spec.store_key)
            self._readers = {s.name: make_reader(s, None, spec.kafka_bootstrap) for s in graph.sources()}
            self.outputs.open(spec, graph)
            self._queue.clear()
            self._running.clear()
            self._state_steps = {ch: body["committed"] for ch in owned if graph.is_stateful(ch.stage)}
            self._keeper = EpochKeeper(self.worker)
            self._set_state(WorkerState.OPEN, body["committed"])
            self._cv.notify_all()
        return {"ok": True}

    def _do_adopt(self, body: dict[str, Any]) -> dict[str, Any]:
        """Admitted to a run: its token goes with every completion and sink write from now on, so this
        worker's id alone never passes for a member of a later run (``coordinator/admission.py``)."""
        self.tables.run = str(body["run"])
        return {"ok": True}

    def _do_open(self, body: dict[str, Any]) -> dict[str, Any]:
        """Reopen at a committed checkpoint (``manifest``; None: the very beginning)."""
        assert self.graph is not None
        manifest = body.get("manifest") or {"epoch": 0, "boundary": 0, "states": {}}
        graph = self.graph
        owned = [ch for ch in self.owned() if graph.is_stateful(ch.stage)]
        states = {ch.key(): manifest["states"].get(ch.key(), {"channel": ch.key(), "step": 0, "path": ""})
                  for ch in owned}
        with self._cv:
            self.buffer.reset()
            self._queue.clear()
            self._running.clear()
            self._deficits.clear()
            self._state_steps = {Channel.parse(c): int(s["step"]) for c, s in states.items()}
            self._keeper.reset(int(manifest["epoch"]))
            self.inputs.inflight_epoch = int(manifest["epoch"])
            self._opening = {"states": states, "boundary": int(manifest["boundary"])}
            self._set_state(WorkerState.OPENING, int(manifest["boundary"]))
        self._ready.set()
        return {"ok": True}

    def _do_step(self, body: dict[str, Any]) -> dict[str, Any]:
        with self._cv:
            if self._state is not WorkerState.OPENING:
                self._set_state(WorkerState.RUNNING, int(body["step"]))
        self.refresh(force=True)
        self._ready.set()
        return {"ok": True}

    def _do_wake(self, body: dict[str, Any]) -> dict[str, Any]:
        self.refresh(force=True)
        self._ready.set()
        return {"ok": True}

    def _do_checkpoint(self, body: dict[str, Any]) -> dict[str, Any]:
        """The coordinator started checkpoint epoch ``epoch`` (Feldera's ``checkpoint()``).

        A worker with channels checkpoints when it meets the first message of the
        new epoch; one without channels will meet none, so it checkpoints now.
        """
        epoch = int(body["epoch"])
        with self._cv:
            if body.get("settle"):
                self._keeper.settle(epoch)
            if self.owned():
                return {"now": False}
            deficit = self._keeper.checkpoint_now(epoch)
        if deficit is not None:
            self.store.send({"t": "checkpointed", "w": self.worker, "epoch": epoch, "deficit": deficit, "snapshots": []})
        return {"now": deficit is not None}

    def _do_shutdown(self, body: dict[str, Any]) -> dict[str, Any]:
        self.stopping.set()
        return {"ok": True}

    def _do_handover(self, body: dict[str, Any]) -> dict[str, Any]:
        """The coordinator holds the steps for this leaving worker: snapshot its states as ``epoch``."""
        with self._cv:
            self.leaving.handover(int(body["epoch"]))
        self._ready.set()
        return {"ok": True}

    def _do_stats(self, body: dict[str, Any]) -> dict[str, Any]:
        return {"held_objects": self.buffer.held(), "held_bytes": self.buffer.held_bytes(), "running": len(self._running)}

    # --- the Spark process's calls -----------------------------------------
    def _do_hello(self, body: dict[str, Any]) -> dict[str, Any] | None:
        if not self._joined:
            self._joined = True
            self.store.send({"t": "joined", "w": self.worker, "address": self.address})
        if self._config is None:
            return None
        return {**self._config, "spec": for_user_code(self._config["spec"])}  # no control-plane endpoint

    def _do_next_task(self, body: dict[str, Any]) -> dict[str, Any] | None:
        deadline = time.monotonic() + body.get("timeout_ms", 1000) / 1000
        while not self.stopping.is_set():
            self._ready.clear()  # before looking: a wake-up during the look is not lost
            with self._cv:
                if self._opening is not None:
                    return {"open": self._opening}
                handover = self.leaving.snapshot_due(not self._running)
                if handover is not None:  # between tasks: every state as of the last step it folded
                    return {"snapshot": handover}
            self.refresh()
            picked = self._pick()
            if picked is not None:
                return picked
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            self._ready.wait(min(left, SAFETY_POLL_S))
        return {"shutdown": True}

    def still_member(self) -> bool:
        """Does the run still count this worker? Before ``create`` it belongs to no run yet; after, only
        while the coordinator has not declared it dead (the lineage tables' ``alive`` set)."""
        return self.fenced is None and (self.spec is None or self.tables.is_member(self.worker))

    def fence(self, reason: str) -> None:
        """The cluster declared this worker dead (or a new run began): take no new task; the running
        ones may still try to commit, and the lineage tables refuse them."""
        self.fenced = reason

    def refused(self, what: str, stat: str, counted: bool = False) -> None:
        """This worker, let go by the run, tried ``what`` and was refused: counted in ``stat`` (unless the
        refusal ``counted`` it already), and told to the coordinator (its terminal line, an Event), once per
        kind. A worker cut off from Redis is refused all the same, uncounted."""
        try:
            if not counted:
                self.store.add_stats({stat: 1})
            if stat not in self._refusals_told:
                self._refusals_told.add(stat)
                self.store.send({"t": "fenced", "w": self.worker, "what": what})
        except Exception as exc:
            log.warning("a refusal not reported", extra={"worker": self.worker, "error": str(exc)})

    def _do_may_write(self, body: dict[str, Any]) -> dict[str, Any]:
        """Asked by the Spark process before it writes to a sink: only a member of the run may."""
        if self.tables.is_member(self.worker):
            return {"ok": True}
        self.refused("its sink write was refused", "fenced_sink_writes")
        log.error("fenced: sink write refused", extra={"worker": self.worker, "reason": self.fenced})
        return {"ok": False}

    def _do_opened(self, body: dict[str, Any]) -> dict[str, Any]:
        with self._cv:
            if self._opening is not None:
                self._set_state(WorkerState.OPEN, self._opening["boundary"])
                self._opening = None
        return {"ok": True}

    def _do_task_done(self, body: dict[str, Any]) -> dict[str, Any]:
        assert self.graph is not None and self.spec is not None
        task = Task.from_json(body["task"])
        lineage = self.spec.fault_tolerance
        inputs = [o.key() for o in self.graph.inputs_of(task)]
        stateful = task.kind in (TaskKind.AGGREGATE, TaskKind.REBUILD)
        keeps_inputs = lineage and stateful
        rows_in = int(body["rows_in"])
        stats = {"tasks": 1, "rows_in": rows_in}
        if body.get("evicted"):
            stats["evicted_keys"] = int(body["evicted"])
        if task.recovery:
            stats["replayed_rows"] = rows_in
            stats["recovery_tasks"] = 1
        if self.metrics is not None:
            self.metrics.task_done(rows_in, task.recovery, int(body.get("evicted", 0)))
        for sink, step, channel, name in body.get("staged", []):  # before the completion: a release needs them
            self.outputs.stage(sink, int(step), int(channel), self.buffer.root / name)
            (self.buffer.root / name).unlink(missing_ok=True)
        self.buffer.index(body["outputs"])  # before PT says so: a consumer that looks finds them
        with self._cv:  # atomic w.r.t. _refresh: the task leaves NTT and _running together
            clock = self._keeper.clock if task.recovery else self._keeper.produce(len(body["outputs"]))
            done = Completion(
                task=task,
                outputs=[(name, rows) for name, rows, *_ in body["outputs"]],
                consumed=[] if keeps_inputs else inputs,
                state_step=task.step if stateful else None,
                event={"t": "done", "w": self.worker, "id": task.id, "step": task.step, "kind": task.kind.value,
                       "rows_in": rows_in, "rows_out": sum(r for _, r, *_ in body["outputs"]), "recovery": task.recovery,
                       "dead": int(body.get("dead_letters", 0)), "late": int(body.get("late", 0)),
                       **({"tmax": body["event_max"]} if body.get("event_max") is not None else {}),
                       **({"tmin": body["event_min"]} if body.get("event_min") is not None else {}),
                       **({"warnings": body["warnings"]} if body.get("warnings") else {}),
                       # the executor's parts of the task, and this sidecar's last lineage write (this one's
                       # is not known until the event it travels in is written: obs/phases.py)
                       "parts": {**body.get("parts", {}), "record": round(self._record_s, 6)}},
                stats=stats,
                clock=clock.encode(),
                dead_letters=int(body.get("dead_letters", 0)),
                digests=body.get("digests", {}),
            )
            recording = time.perf_counter()
            result = self.tables.complete(self.worker, done, lineage=lineage)
            self._record_s = time.perf_counter() - recording
            for name in self._running.pop(task.id, []):
                self.buffer.uncache(name)
            if result == 1 and stateful:
                self._state_steps[task.ref] = task.step
            if result == 1 and self._crash is not None and self.graph.stage(task.stage).process is not None:
                self._crash.after("process-done")  # tests: exit with the task's outputs held here alone
        if result == 1:
            self._ready.set()
            if body["outputs"]:
                self.tables.announce(self.worker)
        else:
            self.buffer.unindex(body["outputs"])
        if result == -1:
            log.error("fenced", extra={"worker": self.worker, "task": task.id})
            self.refused(f"its late commit of task {task.id} was refused", "fenced_commits", counted=True)
            self.stopping.set()
        elif result == -2:  # not fenced: Redis restarted empty, and the coordinator rolls the run back
            log.warning("the lineage store lost its state: completion dropped, the rollback re-runs it",
                        extra={"worker": self.worker, "task": task.id})
        return {"recorded": result}

    def _do_task_failed(self, body: dict[str, Any]) -> dict[str, Any]:
        self.store.send({"t": "failed", "w": self.worker, "id": body["id"], "error": body["error"],
                         **({"user": body["user"]} if body.get("user") else {})})
        return {"ok": True}

    def _do_snapshot_done(self, body: dict[str, Any]) -> dict[str, Any]:
        epoch = int(body["epoch"])
        with self._cv:
            deficit = self._deficits.pop(epoch, 0)
        self.store.send({"t": "checkpointed", "w": self.worker, "epoch": epoch, "deficit": deficit,
                         "snapshots": body["snapshots"]})
        return {"ok": True}

    def _do_snapshot_failed(self, body: dict[str, Any]) -> dict[str, Any]:
        self._storage_failed(int(body["epoch"]), "snapshot", str(body["error"]))
        return {"ok": True}

    def _storage_failed(self, epoch: int, what: str, error: str) -> None:
        """A snapshot or an in-flight message of ``epoch`` could not be written: that cut cannot complete."""
        with self._cv:
            self._deficits.pop(epoch, None)
        log.error(f"checkpoint {what} not written", extra={"worker": self.worker, "epoch": epoch, "error": error})
        self.store.send({"t": "checkpoint_failed", "w": self.worker, "epoch": epoch, "error": error})

    # --- tasks -------------------------------------------------------------
    def refresh(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last_refresh < 0.1:
            return
        self._last_refresh = now
        if self.graph is None:
            return
        with self._cv:  # read NTT and rebuild the queue under the lock task completion holds
            if self._opening is not None:
                return
            tasks = {t.id: t for t in self.tables.tasks_of(self.worker)}
            self._queue = {i: t for i, t in tasks.items() if i not in self._running}
            if self._state is WorkerState.RUNNING and not tasks:
                self._set_state(WorkerState.OPEN, self._step)

    def _pick(self) -> dict[str, Any] | None:
        """The next ready task; with it, when it is ``_groupable``, every other ready task of its stage,
        step and epoch (``_groups_with``), as ``{"group": [...]}``."""
        assert self.graph is not None
        if self.fenced is not None:
            return None
        graph = self.graph
        with self._cv:
            candidates = sorted(self._queue.values(), key=lambda t: _priority(graph, t))
        if self._chaos is not None:  # fault injection: deliver messages late and out of order
            self._chaos[0].shuffle(candidates)
            time.sleep(self._chaos[0].uniform(0, self._chaos[1]))
        picked: list[dict[str, Any]] = []
        first: Task | None = None
        for task in candidates:
            if first is not None and not _groups_with(first, task):
                continue
            reply = self._hand_out(task)
            if reply is not None:
                picked.append(reply)
                first = task
                if not _groupable(graph, task):
                    break
        if len(picked) > 1:
            return {"group": picked}
        return picked[0] if picked else None

    def _hand_out(self, task: Task) -> dict[str, Any] | None:
        """``task`` taken from the queue for the Spark process, if it is ready (its inputs readable here)."""
        assert self.graph is not None
        graph = self.graph
        if task.kind is TaskKind.AGGREGATE and self._state_steps.get(task.ref) != task.step - 1:
            return None
        names = [o.key() for o in graph.inputs_of(task)]
        inputs = self.inputs.resolve(names)
        if inputs is None:
            return None
        with self._cv:
            if self._queue.pop(task.id, None) is None:
                return None
            self._running[task.id] = [n for n, p, _ in inputs if Path(p).parent == self.buffer.cache]
            if task.kind is TaskKind.REBUILD:
                self._state_steps.pop(task.ref, None)
            reply: dict[str, Any] = {"task": task.to_json(), "inputs": inputs}
            if not task.recovery:
                reply.update(self._consume(task, names, inputs))
        if graph.on_event_time(task.stage) or graph.on_processing_time(task.stage) or (
                graph.stage(task.stage).lookup is not None):  # each of its steps' recorded clock (StepClock)
            reply["clocks"] = {s: c.to_json() for s, c in self.store.clocks(task.steps).items()}
        return reply

    def _consume(self, task: Task, names: list[str], inputs: list[list[Any]]) -> dict[str, Any]:
        """The checkpoint algorithm at task start (see ``epochs.py``); called under the lock."""
        clocks = [VectorClock.decode(c) for c in self.tables.clocks(names)] if names else []
        source_epoch = task.ckpt if task.kind is TaskKind.SOURCE else None
        seen = self._keeper.consume(clocks, source_epoch)
        extra: dict[str, Any] = {}
        if seen.checkpoint is not None:
            self._deficits[seen.checkpoint] = seen.deficit
            extra["checkpoint"] = seen.checkpoint
        if seen.inflight and self.inputs.storage is not None:
            epoch = self._keeper.clock.epoch
            try:
                saved = {inputs[i][0]: self._save_inflight(epoch, *inputs[i]) for i in seen.inflight}
            except OSError as exc:  # storage unwritable: this cut cannot complete, the task runs all the same
                self._storage_failed(epoch, "in-flight message", one_line(exc))
            else:
                self.store.send({"t": "inflight", "w": self.worker, "epoch": epoch, "objects": saved})
        return extra

    def _save_inflight(self, epoch: int, name: str, path: str, batch: int) -> int:
        assert self.inputs.storage is not None
        table = read_ipc(Path(path), batch)
        self.inputs.storage.store.put(self.inputs.storage.inflight_key(epoch, name), ipc_bytes(table))
        return int(table.num_rows)
