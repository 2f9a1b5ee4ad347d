"""The runtime sidecar: buffer, transfers, lineage bookkeeping, control API.

The Spark process computes; everything about fault tolerance happens here,
in a separate process that never runs user code. It

- serves the coordinator's calls (Feldera's pipeline interface) and the
  local Spark process's requests over one Arrow Flight server;
- pulls its tasks from its NTT (Quokka: "things in the NTT must be executed
  by the node"), hands the Spark process a task only when every input is
  located (PT) and, if remote, fetched into the local cache;
- records each completion atomically (outputs in PT/NOT/LT, inputs into the
  cemetery, the stateful channel's step) with one script;
- collects garbage: drops consumed objects, in shared mode of the PT lock;
- reports available source records to the coordinator (``received``), and
  a recorded but uncommitted next step (``replay``).

States (what ``state()`` answers)::

    CLOSED  --create(config)-->  OPEN(n)      n = steps committed so far
    OPEN(n) --step(n+1)-->       RUNNING(n+1)
    RUNNING(s) --its step-s tasks all done--> OPEN(s)
    any     --create(config)-->  OPEN(n)      (a fresh start discards the buffer)

Transitions happen only in :meth:`Sidecar._set_state`.

Which stateful channels have their state in this worker's Spark process is
tracked here (``_state_steps``): a channel owned at ``create`` starts at step
0; a channel adopted in recovery has no state until its ``rebuild`` task
ran. An aggregate task for step k is handed out only when the channel's
state is at k-1, so state is always folded in step order.
"""

from __future__ import annotations

import argparse
import enum
import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow.flight as flight
import redis

from ftpipeline.barrier import ParquetBundleSink
from ftpipeline.control.store import RunStore
from ftpipeline.dataflow.graph import Graph
from ftpipeline.dataflow.sources import SourceReader, make_reader
from ftpipeline.lineage.naming import Channel, Task, TaskKind, WorkerId
from ftpipeline.lineage.tables import Completion, LineageTables
from ftpipeline.obs.logging import setup_json_logging
from ftpipeline.spec.load import parse_pipeline
from ftpipeline.spec.model import PipelineSpec
from ftpipeline.worker.buffer import ObjectBuffer, write_ipc
from ftpipeline.worker.transport import SidecarClient

log = logging.getLogger("ftpipeline.sidecar")


class WorkerState(str, enum.Enum):
    CLOSED = "closed"
    OPEN = "open"
    RUNNING = "running"


def _priority(graph: Graph, task: Task) -> tuple[int, int, int, int]:
    # rebuilds first (they unblock a channel), then older steps, then topological order
    return (0 if task.kind is TaskKind.REBUILD else 1, task.step, graph.rank(task.stage), task.channel)


class Sidecar:
    def __init__(self, worker: WorkerId, pipeline: str, redis_url: str, root: Path) -> None:
        self.worker = worker
        self.r = redis.Redis.from_url(redis_url)
        self.tables = LineageTables(self.r, pipeline)
        self.store = RunStore(self.r, pipeline)
        self.buffer = ObjectBuffer(root)
        self.buffer.reset()
        self.address = ""
        self._cv = threading.Condition()
        self._state = WorkerState.CLOSED
        self._step = 0
        self._config: dict[str, Any] | None = None
        self.spec: PipelineSpec | None = None
        self.graph: Graph | None = None
        self._readers: dict[str, SourceReader] = {}
        self._queue: dict[str, Task] = {}
        self._running: dict[str, list[str]] = {}  # task id -> cached input names
        self._state_steps: dict[Channel, int] = {}
        self._peers: dict[str, SidecarClient] = {}
        self._joined = False
        self._last_refresh = 0.0
        self._sent: dict[Channel, tuple[Any, ...]] = {}
        self._replayed = 0
        self.stopping = threading.Event()

    # --- states ------------------------------------------------------------
    def _set_state(self, state: WorkerState, step: int) -> None:
        if (state, step) != (self._state, self._step):
            log.info("state", extra={"worker": self.worker, "from": self._state.value, "to": state.value, "step": step})
        self._state, self._step = state, step

    # --- dispatch ----------------------------------------------------------
    def handle(self, action: str, body: dict[str, Any]) -> Any:
        handler = getattr(self, f"_do_{action}", None)
        if handler is None:
            raise KeyError(f"unknown action {action!r}")
        return handler(body)

    # --- the coordinator's calls -------------------------------------------
    def _do_state(self, body: dict[str, Any]) -> dict[str, Any]:
        with self._cv:
            return {"state": self._state.value, "step": self._step, "worker": self.worker}

    def _do_create(self, body: dict[str, Any]) -> dict[str, Any]:
        spec = parse_pipeline(body["spec"], Path(body["base_dir"]), check_entry_point=False)
        graph = Graph(spec)
        owned = [ch for ch, w in self.tables.placement().items() if w == self.worker]
        with self._cv:
            self.buffer.reset()
            self.spec, self.graph, self._config = spec, graph, dict(body)
            self._readers = {s.name: make_reader(s, None) for s in graph.sources()}
            self._queue.clear()
            self._running.clear()
            self._state_steps = {ch: body["committed"] for ch in owned if graph.is_stateful(ch.stage)}
            self._set_state(WorkerState.OPEN, body["committed"])
            self._cv.notify_all()
        return {"ok": True}

    def _do_step(self, body: dict[str, Any]) -> dict[str, Any]:
        with self._cv:
            self._set_state(WorkerState.RUNNING, int(body["step"]))
        self._refresh(force=True)
        return {"ok": True}

    def _do_wake(self, body: dict[str, Any]) -> dict[str, Any]:
        self._refresh(force=True)
        return {"ok": True}

    def _do_release(self, body: dict[str, Any]) -> dict[str, Any]:
        assert self.graph is not None
        step = int(body["step"])
        released = {}
        for sink in self.graph.sinks():
            assert sink.sink is not None
            released[sink.name] = ParquetBundleSink(sink.sink.path).release(step, sink.parallelism)
        return {"released": released}

    def _do_shutdown(self, body: dict[str, Any]) -> dict[str, Any]:
        self.stopping.set()
        return {"ok": True}

    def _do_stats(self, body: dict[str, Any]) -> dict[str, Any]:
        return {"held_objects": self.buffer.held(), "held_bytes": self.buffer.held_bytes()}

    # --- the Spark process's calls -----------------------------------------
    def _do_hello(self, body: dict[str, Any]) -> dict[str, Any] | None:
        if not self._joined:
            self._joined = True
            self.store.send({"t": "joined", "w": self.worker, "address": self.address})
        return self._config

    def _do_next_task(self, body: dict[str, Any]) -> dict[str, Any] | None:
        deadline = time.monotonic() + body.get("timeout_ms", 1000) / 1000
        while not self.stopping.is_set():
            self._refresh()
            picked = self._pick()
            if picked is not None:
                task, inputs = picked
                return {"task": task.to_json(), "inputs": inputs}
            if time.monotonic() > deadline:
                return {"shutdown": True} if self.stopping.is_set() else None
            time.sleep(0.005)
        return {"shutdown": True}

    def _do_task_done(self, body: dict[str, Any]) -> dict[str, Any]:
        assert self.graph is not None and self.spec is not None
        task = Task.from_json(body["task"])
        lineage = self.spec.fault_tolerance
        inputs = [o.key() for o in self.graph.inputs_of(task)]
        keeps_inputs = lineage and task.kind in (TaskKind.AGGREGATE, TaskKind.REBUILD)
        stateful = task.kind in (TaskKind.AGGREGATE, TaskKind.REBUILD)
        rows_in = int(body["rows_in"])
        stats = {"tasks": 1, "rows_in": rows_in, "dead_letters": int(body.get("dead_letters", 0))}
        if task.recovery:
            stats["replayed_rows"] = rows_in
            stats["recovery_tasks"] = 1
        done = Completion(
            task=task,
            outputs=[(name, rows) for name, rows in body["outputs"]],
            consumed=[] if keeps_inputs else inputs,
            state_step=task.step if stateful else None,
            event={"t": "done", "w": self.worker, "id": task.id, "step": task.step, "kind": task.kind.value,
                   "rows_in": rows_in, "rows_out": sum(r for _, r in body["outputs"]), "recovery": task.recovery},
            stats=stats,
        )
        with self._cv:  # atomic w.r.t. _refresh: the task leaves NTT and _running together
            result = self.tables.complete(self.worker, done, lineage=lineage)
            for name in self._running.pop(task.id, []):
                self.buffer.uncache(name)
            if result == 1 and stateful:
                self._state_steps[task.ref] = task.step
        if result == -1:
            log.error("fenced", extra={"worker": self.worker, "task": task.id})
            self.stopping.set()
        return {"recorded": result}

    def _do_task_failed(self, body: dict[str, Any]) -> dict[str, Any]:
        self.store.send({"t": "failed", "w": self.worker, "id": body["id"], "error": body["error"]})
        return {"ok": True}

    # --- tasks -------------------------------------------------------------
    def _refresh(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last_refresh < 0.1:
            return
        self._last_refresh = now
        if self.graph is None:
            return
        with self._cv:  # read NTT and rebuild the queue under the lock task completion holds
            tasks = {t.id: t for t in self.tables.tasks_of(self.worker)}
            self._queue = {i: t for i, t in tasks.items() if i not in self._running}
            if self._state is WorkerState.RUNNING and not tasks:
                self._set_state(WorkerState.OPEN, self._step)

    def _pick(self) -> tuple[Task, list[list[str]]] | None:
        assert self.graph is not None
        graph = self.graph
        with self._cv:
            candidates = sorted(self._queue.values(), key=lambda t: _priority(graph, t))
        for task in candidates:
            if task.kind is TaskKind.AGGREGATE and self._state_steps.get(task.ref) != task.step - 1:
                continue
            inputs = self._resolve(task)
            if inputs is None:
                continue
            with self._cv:
                if self._queue.pop(task.id, None) is None:
                    continue
                self._running[task.id] = [n for n, p in inputs if Path(p).parent == self.buffer.cache]
                if task.kind is TaskKind.REBUILD:
                    self._state_steps.pop(task.ref, None)
            return task, inputs
        return None

    def _resolve(self, task: Task) -> list[list[str]] | None:
        """Local paths of every input, fetching remote ones; None if any is not available yet."""
        assert self.graph is not None
        names = [o.key() for o in self.graph.inputs_of(task)]
        where = self.tables.locate(names)
        if any(w is None for w in where):
            return None
        out = []
        for name, holder in zip(names, where):
            if holder == self.worker:
                path = self.buffer.object_path(name)
                if not path.exists():
                    return None
            else:
                path = self.buffer.cache_path(name)
                if not path.exists() and not self._fetch(name, WorkerId(str(holder)), path):
                    return None
            out.append([name, str(path)])
        return out

    def _fetch(self, name: str, holder: WorkerId, path: Path) -> bool:
        address = self.store.address(holder)
        if address is None:
            return False
        client = self._peers.get(address)
        if client is None:
            client = self._peers[address] = SidecarClient(address, timeout_s=10)
        try:
            table = client.fetch(name)
        except (flight.FlightError, OSError) as exc:
            log.warning("fetch failed", extra={"object": name, "holder": holder, "error": str(exc)})
            self._peers.pop(address, None)
            return False
        write_ipc(path, table)
        return True

    # --- background work ---------------------------------------------------
    def collect_garbage(self) -> int:
        dropped = self.tables.collect(self.worker)
        for name in dropped or []:
            self.buffer.drop(name)
        return len(dropped or [])

    def report_sources(self) -> None:
        """Feldera's received(step, n): records available to this worker's source channels."""
        if self.graph is None:
            return
        owned = [ch for ch, w in self.tables.placement().items() if w == self.worker and ch.stage in self._readers]
        if not owned:
            return
        offsets = self.store.next_offsets()
        now = time.monotonic()
        for ch in owned:
            start = offsets.get(ch, 0)
            reader = self._readers[ch.stage]
            n = reader.available(ch.index, start)
            report = (start, -1 if n is None else n, reader.exhausted(ch.index, start))
            last = self._sent.get(ch)
            if last is None or last[:3] != report or now - last[3] > 1.0:
                self._sent[ch] = (*report, now)
                self.store.send({"t": "received", "w": self.worker, "step": self._step + 1, "ch": ch.key(),
                                 "start": report[0], "n": report[1], "exhausted": report[2]})

    def report_replay(self) -> None:
        """Feldera's replay(step): the step log already holds the next step's offsets.

        That happens when a step was recorded and then the coordinator went away
        before committing it; the next step must then re-run with exactly those
        offsets, at once.
        """
        if self._state is not WorkerState.OPEN or self._replayed == self._step + 1:
            return
        if self.store.step(self._step + 1) is not None:
            self._replayed = self._step + 1
            self.store.send({"t": "replay", "w": self.worker, "step": self._replayed})

    def background(self) -> None:
        next_gc = 0.0
        while not self.stopping.is_set():
            try:
                self._refresh()
                self.report_sources()
                self.report_replay()
                if self.spec is not None and time.monotonic() >= next_gc:
                    self.collect_garbage()
                    next_gc = time.monotonic() + self.spec.gc_interval_ms / 1000
            except redis.RedisError as exc:
                log.error("redis unavailable", extra={"error": str(exc)})
            time.sleep(0.05)


class _FlightServer(flight.FlightServerBase):  # type: ignore[misc]
    def __init__(self, location: str, sidecar: Sidecar) -> None:
        super().__init__(location)
        self.sidecar = sidecar

    def do_get(self, context: Any, ticket: flight.Ticket) -> flight.RecordBatchStream:
        name = ticket.ticket.decode()
        path = self.sidecar.buffer.object_path(name)
        if not path.exists():
            raise flight.FlightServerError(f"object {name} is not held by {self.sidecar.worker}")
        from ftpipeline.worker.buffer import read_ipc

        return flight.RecordBatchStream(read_ipc(path))

    def do_action(self, context: Any, action: flight.Action) -> Any:
        raw = action.body.to_pybytes() if action.body is not None else b""
        body = json.loads(raw or b"{}")
        try:
            result = self.sidecar.handle(action.type, body)
        except Exception:
            log.exception("action failed", extra={"action": action.type})
            raise
        yield flight.Result(json.dumps(result).encode())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="ftpipeline runtime sidecar")
    parser.add_argument("--worker-id", required=True)
    parser.add_argument("--pipeline", required=True)
    parser.add_argument("--redis-url", required=True)
    parser.add_argument("--dir", required=True, type=Path, help="buffer directory shared with the Spark process")
    parser.add_argument("--bind", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--advertise", default=None, help="address peers use to reach this worker (default: --bind)")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    setup_json_logging()
    sidecar = Sidecar(WorkerId(args.worker_id), args.pipeline, args.redis_url, args.dir)
    server = _FlightServer(f"grpc://{args.bind}:{args.port}", sidecar)
    sidecar.address = f"{args.advertise or args.bind}:{server.port}"
    sidecar.store.register(sidecar.worker, {"address": sidecar.address, "pid": os.getpid()})
    (args.dir / "sidecar.addr.tmp").write_text(sidecar.address)
    os.replace(args.dir / "sidecar.addr.tmp", args.dir / "sidecar.addr")
    threading.Thread(target=sidecar.background, name="background", daemon=True).start()
    log.info("listening", extra={"worker": sidecar.worker, "address": sidecar.address})
    threading.Thread(target=lambda: (sidecar.stopping.wait(), server.shutdown()), daemon=True).start()
    server.serve()


if __name__ == "__main__":
    main()
