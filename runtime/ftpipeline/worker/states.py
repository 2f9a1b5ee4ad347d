"""The keyed states a worker's Spark process holds, and the operators that step them.

Each keyed stateful channel this worker runs has one state (``state/``), or
none yet; its operator (``operators/``) steps it with a step's rows. This
module keeps them apart from the task runner (``executor.py``), which reads
a task's inputs and writes its outputs: here a state is created, stepped,
rebuilt from its base in a lineage recovery, frozen and written for a
checkpoint, reopened from one (re-partitioned by key when the stage's
parallelism changed, ``rekey.py``) and closed.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow as pa

from ftpipeline.checkpoint import rescale
from ftpipeline.checkpoint.storage import CheckpointStorage
from ftpipeline.checkpoint.tracker import ChannelSnapshot
from ftpipeline.lineage.stepclock import StepClock
from ftpipeline.dataflow.graph import Graph
from ftpipeline.dataflow.sources import DeadLetter
from ftpipeline.lineage.naming import Channel, ObjectName, Task, TaskKind
from ftpipeline.obs.errors import one_line
from ftpipeline.operators import make_operator
from ftpipeline.eventtime.order import apart, held, plain, together
from ftpipeline.operators.base import Holder, Operator, StepContext
from ftpipeline.spec.model import PipelineSpec
from ftpipeline.state.backend import KeyedState, StateBackend
from ftpipeline.worker.rekey import restore_rescaled

log = logging.getLogger("ftpipeline.executor")
Reader = Callable[[list[list[Any]]], tuple[pa.Table | None, int]]  # input objects -> their rows


class ChannelStates:
    def __init__(self, spark: Any, spec: PipelineSpec, graph: Graph, module: Any, backend: StateBackend,
                 storage: CheckpointStorage) -> None:
        self.spark, self.spec, self.graph = spark, spec, graph
        self.backend, self.storage = backend, storage
        self.operators: dict[str, Operator] = {  # every keyed stateful stage's (operators/)
            s.name: op for s in graph.spec.stages if (op := make_operator(s, spark, module)) is not None}
        self.states: dict[Channel, KeyedState | None] = {}
        self.state_steps: dict[Channel, int] = {}
        self.evicted = 0  # keys forgotten by TTL since the last task reported
        self.warnings: list[str] = []  # what operators said since the last task reported

    def snapshot(self, epoch: int, done: Callable[[list[dict[str, Any]]], None],
                 failed: Callable[[str], None]) -> threading.Thread:
        """Write every state this process holds, asynchronously; call ``done`` with the snapshots.

        Each state is frozen here, before the next task runs (an Arrow
        table's reference; a RocksDB checkpoint directory of hard links), and
        written in the background. A freeze or write that fails (storage
        gone, full, read-only) calls ``failed`` with the error, which names
        the path: the coordinator aborts this checkpoint and the run goes on
        to the next one.
        """
        try:
            writers = [self._freeze(epoch, ch, state) for ch, state in self.states.items()]
        except Exception as exc:
            log.error("snapshot failed", extra={"epoch": epoch, "error": one_line(exc)})
            writers = []
            error: str | None = one_line(exc)
        else:
            error = None

        def write() -> None:
            if error is not None:
                report(failed, error)
                return
            try:
                snaps = [vars(w()) for w in writers]
            except Exception as exc:
                log.error("snapshot failed", extra={"epoch": epoch, "error": one_line(exc)})
                report(failed, one_line(exc))
                return
            report(done, snaps)

        def report(call: Callable[[Any], None], arg: Any) -> None:
            try:
                call(arg)
            except Exception as exc:  # the sidecar is going away: so is this worker, whose loss aborts the cut
                log.warning("snapshot report not delivered", extra={"epoch": epoch, "error": one_line(exc)})

        thread = threading.Thread(target=write, name=f"snapshot-{epoch}", daemon=True)
        thread.start()
        return thread

    def _freeze(self, epoch: int, ch: Channel, state: KeyedState | None) -> Callable[[], ChannelSnapshot]:
        step = self.state_steps.get(ch, 0)
        if state is None:
            return lambda: self.storage.write_state(epoch, ch.key(), step, None)
        self.evicted += self.operators[ch.stage].evict(state, step)  # expired keys do not reach the checkpoint
        return state.freeze(self.storage, epoch, ch.key(), step)

    def open(self, states: dict[str, dict[str, Any]]) -> None:
        """Reopen at a checkpoint: drop every state, load the snapshots of this worker's channels."""
        self.close()
        self.states = {Channel.parse(c): self.restore(Channel.parse(c), s["path"], int(s["step"]))
                       for c, s in states.items()}
        self.state_steps = {Channel.parse(c): int(s["step"]) for c, s in states.items()}

    def close(self) -> None:
        """Release every state (a RocksDB state's directory too)."""
        for state in self.states.values():
            if state is not None:
                state.close()
        self.states = {}

    def restore(self, ch: Channel, path: str, step: int) -> KeyedState | None:
        operator = self.operators[ch.stage]
        keys, index = operator.keys, operator.index
        rescaled = rescale.parse(path)  # the stage's parallelism changed since the checkpoint
        if rescaled is not None:
            return restore_rescaled(self.spark, self.backend, self.storage, ch, rescaled, keys, step, index)
        return self.backend.restore(ch.key(), self.storage, path, keys, step, index)

    def operate(self, task: Task, inputs: list[list[Any]], clocks: dict[int, StepClock], read: Reader
                ) -> tuple[pa.Table | None, list[DeadLetter], pa.Table | None]:
        """A step of a keyed operator (``operators/``): its rows, dead letters and late rows. A rebuild runs each
        of its steps in turn, with the clock each ran with (its watermark and time), emitting nothing: the state
        it leaves is the state after its last step. ``read``: the rows of input objects."""
        operator = self.operators[task.stage]
        if task.kind is TaskKind.REBUILD:  # the state is rebuilt from its base: drop what this worker held
            old = self.states.pop(task.ref, None)
            if old is not None:
                old.close()
            self.states[task.ref] = self.restore(task.ref, task.base, 0) if task.base else None
        holder: Holder = _Holder(self, task.ref, operator.keys, operator.index)
        by_step: dict[int, list[list[Any]]] = {}
        for entry in inputs:
            by_step.setdefault(ObjectName.parse(entry[0]).seq, []).append(entry)
        steps = list(task.steps)
        if operator.folds_at_once and task.kind is TaskKind.REBUILD:  # merging is associative: one fold
            by_step, steps = {task.step: list(inputs)}, [task.step] if inputs else []
        timed = self.graph.on_event_time(task.stage)
        emitted: _Step | None = None
        for step in steps:
            objects = by_step.get(step, [])
            assert objects, f"{task.id}: no input objects for step {step}"
            if operator.by_input:  # each input's rows apart (a join's two sides), by the input's own name
                edges = zip(self.graph.stage(task.stage).inputs, self.spec.stage(task.stage).inputs)
                parts = {named.upstream: read([o for o in objects if ObjectName.parse(o[0]).actor
                                                       == head.upstream])[0] for head, named in edges}
                tables = {u: t for u, t in parts.items() if t is not None}
            else:
                table = read(objects)[0]
                tables = {"": table if table is not None else pa.table({})}
            clock = clocks.get(step, StepClock())
            hold = self.graph.held_back_us(task.stage)  # the joins upstream hold the watermark back
            clock = replace(clock, watermark=held(clock.watermark, hold), before=held(clock.before, hold))
            emitted = _step(operator, holder, tables, clock, StepContext(
                step, clock.watermark, emit=task.kind is not TaskKind.REBUILD, where=task.ref.key(), now=clock.now),
                timed)
            self.evicted += emitted.evicted if task.kind is not TaskKind.REBUILD else 0
            said: list[str] = getattr(operator, "warnings", [])  # a keyed function's, once each (operators/process.py)
            if said:
                self.warnings += said
                said.clear()
        self.state_steps[task.ref] = task.step
        if emitted is None or task.kind is TaskKind.REBUILD:
            return None, [], None
        return together(emitted.early, emitted.after), emitted.dead, emitted.late


@dataclass
class _Step:
    """What a step of an operator emitted, in Flink's order (``eventtime/order.py``)."""

    early: pa.Table | None = None  # before the watermark's advance, as the operator downstream takes it
    after: pa.Table | None = None
    dead: list[DeadLetter] = field(default_factory=list)
    late: pa.Table | None = None
    evicted: int = 0


def _step(operator: Operator, holder: Holder, tables: dict[str, pa.Table], clock: StepClock, ctx: StepContext,
          timed: bool) -> _Step:
    """One step of ``operator`` over its input ``tables`` (by input name; "" the union of all). An operator with
    event time whose input holds rows from before the step's advance takes those first, judged against the
    watermark before (``clock.before``), and then the rest with the step's (``eventtime/order.py``)."""
    early = {u: apart(t)[0] for u, t in tables.items()}
    after = {u: apart(t)[1] for u, t in tables.items()}
    calls: list[tuple[dict[str, pa.Table], StepContext]] = []
    if timed and any(t.num_rows for t in early.values()):
        calls.append((early, replace(ctx, watermark=clock.before, advance=False)))
        calls.append((after, replace(ctx, first=False)))
    else:
        calls.append(({u: plain(t) for u, t in tables.items()}, ctx))
    out = _Step()
    lates: list[pa.Table] = []
    for i, (given, call) in enumerate(calls):
        by_name = "" not in given
        done = operator.process(holder, pa.table({}) if by_name else given[""],
                                replace(call, inputs=given if by_name else {}))
        out.dead += done.dead
        out.evicted += done.evicted
        if done.late is not None and done.late.num_rows:
            lates.append(done.late)
        last = i == len(calls) - 1
        kinds = [done.fired] + ([] if last else [done.rows])  # all a call before the advance emits is early
        out.early = _concat([out.early, *kinds])
        if last:
            out.after = done.rows if timed else _concat([done.fired, done.rows])
    out.late = pa.concat_tables(lates, promote_options="permissive") if lates else None
    return out


def _concat(tables: list[pa.Table | None]) -> pa.Table | None:
    found = [t for t in tables if t is not None]
    if not found:
        return None
    kept = [t for t in found if t.num_rows] or found[:1]
    return kept[0] if len(kept) == 1 else pa.concat_tables(kept, promote_options="permissive")


class _Holder:
    """A channel's state for an operator: the runner's, created on first use with the operator's keys."""

    def __init__(self, runner: ChannelStates, channel: Channel, keys: list[str], index: str | None) -> None:
        self.runner, self.channel, self.keys, self.index = runner, channel, keys, index

    def get(self) -> KeyedState | None:
        return self.runner.states.get(self.channel)

    def create(self, schema: pa.Schema) -> KeyedState:
        state = self.runner.backend.create(self.channel.key(), schema, self.keys, self.index)
        self.runner.states[self.channel] = state
        return state
