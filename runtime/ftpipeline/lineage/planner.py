"""Lineage recovery planning: which tasks to re-run, where, after a worker is lost.

This is the Quokka seed's algorithm as a pure function over a snapshot of the
lineage tables, so it is tested on hand-written table states and the same code
plans recovery for local processes and for pods.

Guarantee restored by a plan: every object that a *current* task (anything
in a surviving worker's NTT, or re-launched by the plan) needs is present on
a live worker, or will be produced by a task in the plan, or by a task still
pending on a live worker.

Steps of :func:`plan_recovery`:

1. The lost worker's channels are adopted by survivors (``placement.adopt``).
2. Its pending tasks (its NTT) are re-launched on the adopters.
3. Each of its stateful channels lost its in-memory state. It is rebuilt by
   a ``rebuild`` task that starts from the channel's newest committed
   snapshot (or from nothing) and folds every input kept since (stateful
   consumers put their inputs in the cemetery only once a checkpoint covers
   them); steps whose outputs were lost before being consumed are re-run
   after it. A snapshot the channel wrote for a checkpoint that has not
   committed (``newer``: written whole and reported, its files kept until a
   later commit prunes) is a base too, and a closer one: it is taken when
   no lost output of the channel at or before its step is still to be read
   (judged against the committed snapshots, a superset of what the plan will
   need), so the rebuild folds fewer steps.
4. Inputs of all those tasks, and of every task pending on a survivor, that
   are neither present nor about to be produced are regenerated from their
   lineage (LT), recursively until the inputs exist or a source is reached
   (sources re-read their recorded offsets).
5. Every input the plan relies on is *resurrected* (removed from the
   cemetery) when the plan is applied, under the exclusive PT delete lock.

Where this improves on the seed:

- Lost objects that no current task needs (kept only because a stateful
  consumer might one day need to rebuild) are *not* regenerated eagerly.
  Their lineage stays in LT, so a later plan regenerates them if and when
  that rebuild happens. This keeps the critical path to the next committed
  step short, which is the product's recovery target.
- A regeneration task writes only the outputs somebody needs (``emit``);
  its other outputs are already present elsewhere or consumed.
- Regeneration of stateless history is spread over all survivors by step
  (parallel recovery, which the seed names but leaves unplanned), rather
  than queued on the one worker that adopted the channel.
- The seed regenerates an input only when it is "in CT and not in PT". With
  lazy regeneration an input can be lost without being in CT, so the test
  here is simply "not present on a live worker and not going to be produced".

Concurrency, as in the seed: the plan is computed on a snapshot taken while
the coordinator holds the PT delete lock exclusively, so no object that is
present in the snapshot can be deleted before the plan is applied. An object
may *enter* the cemetery meanwhile (its consumer finished); applying the plan
resurrects every input it relies on unconditionally, which covers that race.
Failures are serialised: a second loss is planned on the tables as left by
the first plan, whose tasks then sit in the second victim's NTT. The second
plan may need another output of a task the first plan left pending on a
survivor (a *twin*: same stage, channel and step, other outputs). Both read
the same inputs, and a stateless task buries its inputs when it completes; so
the twin runs on the same worker, whose completion script buries shared
inputs only when the last of the twins finishes.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from ftpipeline.lineage.cemetery import IntervalSet
from ftpipeline.lineage.naming import Channel, ObjectName, Task, TaskKind, WorkerId
from ftpipeline.lineage.placement import adopt


class TaskGraph(Protocol):
    """What planning needs to know about the dataflow (implemented by ``dataflow.graph``)."""

    def inputs_of(self, task: Task) -> list[ObjectName]: ...

    def outputs_of(self, task: Task) -> list[ObjectName]: ...

    def is_stateful(self, stage: str) -> bool: ...


class PlanningError(RuntimeError):
    """The tables do not allow a lineage plan (a bug, or lineage was switched off)."""


@dataclass(frozen=True)
class TablesView:
    """A consistent snapshot of the lineage tables (see ``tables.LineageTables.snapshot``)."""

    ntt: Mapping[WorkerId, frozenset[Task]]
    not_: Mapping[WorkerId, frozenset[str]]
    pt: Mapping[str, WorkerId]
    ct: Mapping[str, IntervalSet]
    lt: Mapping[str, Task]
    rows: Mapping[str, int]
    placement: Mapping[Channel, WorkerId]
    state_steps: Mapping[Channel, int]

    def consumed(self, name: str) -> bool:
        obj = ObjectName.parse(name)
        cemetery = self.ct.get(obj.edge.key())
        return cemetery is not None and obj.seq in cemetery


@dataclass(frozen=True)
class RecoveryPlan:
    dead: WorkerId
    epoch: int
    placement: dict[Channel, WorkerId]
    moves: dict[Channel, WorkerId]
    tasks: tuple[tuple[WorkerId, Task], ...]
    replaced: tuple[str, ...]          # ids of the dead worker's pending tasks, superseded by re-launches
    resurrect: frozenset[str]          # object names to remove from the cemetery
    lost: frozenset[str]               # object names that were held by the dead worker
    buffered_rows: int                 # rows in the dead worker's buffer when it was lost
    planned_rows: int                  # rows the plan's tasks will read (estimate; the runtime counts)
    rebuilt: tuple[Channel, ...] = field(default=())

    @property
    def strategy(self) -> str:
        return "lineage"


def _key(task: Task) -> tuple[str, str, int, int, int]:
    return (task.kind.value, task.stage, task.channel, task.first, task.step)


def _closer_bases(graph: TaskGraph, view: TablesView, lost: frozenset[str], moves: Mapping[Channel, WorkerId],
                  committed: Mapping[Channel, tuple[int, str]], newer: Mapping[Channel, tuple[int, str]]
                  ) -> dict[Channel, tuple[int, str]]:
    """The base each lost stateful channel is rebuilt from: its ``newer`` snapshot where that one is past the
    committed one, within what it applied, and no lost output of the channel at or before its step may still
    be read (a consumer's read judged against the committed snapshots, which need the most); else the
    committed one."""
    bases = dict(committed)
    candidates = {ch: snap for ch, snap in newer.items() if ch in moves and graph.is_stateful(ch.stage)
                  and committed.get(ch, (0, ""))[0] < snap[0] <= view.state_steps.get(ch, 0) and snap[1]}
    if not candidates:
        return bases
    for name in lost:
        obj = ObjectName.parse(name)
        snap = candidates.get(obj.producer)
        if snap is not None and obj.seq <= snap[0] and _unread(graph, view, moves, committed, obj):
            del candidates[obj.producer]
    bases.update(candidates)
    return bases


def _unread(graph: TaskGraph, view: TablesView, moves: Mapping[Channel, WorkerId],
            snapshots: Mapping[Channel, tuple[int, str]], obj: ObjectName) -> bool:
    """Has the object's consumer still to read it? A stateful consumer has read it once its state passed the
    object's step (it keeps its inputs out of the cemetery until a checkpoint covers them); one lost too
    (in ``moves``) reads again every step after its base in ``snapshots``, as its rebuild folds them."""
    if graph.is_stateful(obj.target):
        if obj.consumer in moves:
            return snapshots.get(obj.consumer, (0, ""))[0] < obj.seq
        return view.state_steps.get(obj.consumer, 0) < obj.seq
    return not view.consumed(obj.key())


def plan_recovery(
    graph: TaskGraph,
    view: TablesView,
    dead: WorkerId,
    alive: Sequence[WorkerId],
    epoch: int,
    snapshots: Mapping[Channel, tuple[int, str]] | None = None,
    newer: Mapping[Channel, tuple[int, str]] | None = None,
) -> RecoveryPlan:
    """``snapshots``: per stateful channel, (step, file) of its newest committed snapshot; ``newer``: of one
    written for a checkpoint not committed (yet, or ever), used where it is safe (the module's step 3)."""
    live = frozenset(alive)
    placement, moves = adopt(view.placement, dead, sorted(live), graph.is_stateful)
    lost = view.not_.get(dead, frozenset())
    snapshots = _closer_bases(graph, view, lost, moves, snapshots or {}, newer or {})

    def present(name: str) -> bool:
        return view.pt.get(name) in live

    planned: dict[tuple[str, str, int, int, int], Task] = {}
    produced: set[str] = set()
    work: deque[Task] = deque()

    def outputs(task: Task) -> set[str]:
        names = {o.key() for o in graph.outputs_of(task)}
        return names if task.emit is None else names & task.emit

    def add(task: Task) -> None:
        key = _key(task)
        existing = planned.get(key)
        if existing is not None:
            if existing.emit is None or task.emit is None:
                merged = None
            else:
                merged = existing.emit | task.emit
            task = existing.for_recovery(epoch, merged)
            planned[key] = task
            produced.update(outputs(task))
            return
        planned[key] = task
        produced.update(outputs(task))
        work.append(task)

    # 2. re-launch what the lost worker had pending.
    dead_pending = sorted(view.ntt.get(dead, frozenset()), key=_key)
    for task in dead_pending:
        add(task.for_recovery(epoch, task.emit))

    def needed_now(obj: ObjectName) -> bool:
        return _unread(graph, view, moves, snapshots, obj)

    # 3. stateful channels lost their state.
    lost_stateful = sorted(c for c in moves if graph.is_stateful(c.stage))
    # the lost objects of each lost channel, parsed once (not once per lost stateful channel)
    lost_of: dict[Channel, list[tuple[ObjectName, str]]] = {}
    if lost_stateful:
        for name in lost:
            obj = ObjectName.parse(name)
            lost_of.setdefault(obj.producer, []).append((obj, name))
    rebuilt: list[Channel] = []
    for ch in lost_stateful:
        if any(t.ref == ch and t.kind is TaskKind.REBUILD for t in dead_pending):
            rebuilt.append(ch)  # its rebuild never ran; re-launched above
            continue
        applied = view.state_steps.get(ch, 0)
        lost_by_step: dict[int, set[str]] = {}
        for obj, name in lost_of.get(ch, ()):
            if needed_now(obj):
                lost_by_step.setdefault(obj.seq, set()).add(name)
        redo_from = min([applied + 1, *lost_by_step])
        snap_step, snap_path = (snapshots or {}).get(ch, (0, ""))
        if redo_from <= snap_step:
            raise PlanningError(f"{ch.key()} must redo step {redo_from}, older than its snapshot at {snap_step}")
        add(Task(TaskKind.REBUILD, ch.stage, ch.index, step=redo_from - 1, first=snap_step + 1,
                 recovery=True, epoch=epoch, base=snap_path or None))
        for step in range(redo_from, applied + 1):
            add(Task(TaskKind.AGGREGATE, ch.stage, ch.index, step, recovery=True, epoch=epoch,
                     emit=frozenset(lost_by_step.get(step, set()))))
        rebuilt.append(ch)

    # Outputs that tasks still pending on survivors will produce in the normal course.
    pending_elsewhere: set[str] = set()
    for worker in live:
        for task in view.ntt.get(worker, frozenset()):
            pending_elsewhere.update(outputs(task))

    resurrect: set[str] = set()

    def need(name: str) -> None:
        if present(name) or name in produced or name in pending_elsewhere:
            return
        producer = view.lt.get(name)
        if producer is None:
            raise PlanningError(f"object {name} is lost and has no lineage")
        if graph.is_stateful(producer.stage) and producer.ref not in moves:
            raise PlanningError(
                f"object {name} of stateful channel {producer.ref.key()} is lost, "
                f"but the channel is alive past step {producer.step}"
            )
        add(producer.for_recovery(epoch, frozenset({name})))

    # 4. inputs of survivors' current tasks that were on the lost worker.
    for worker in sorted(live):
        for task in sorted(view.ntt.get(worker, frozenset()), key=_key):
            for obj in graph.inputs_of(task):
                need(obj.key())

    # 4. recursively, inputs of every planned task.
    while work:
        task = work.popleft()
        for obj in graph.inputs_of(task):
            name = obj.key()
            resurrect.add(name)
            need(name)

    # Where each task runs: re-launched work and stateful channels on their (new) owner;
    # regeneration of stateless history spread over all survivors by step, so the
    # lost work is divided among them (a step's source and transform regenerations
    # land on the same worker, keeping forward edges local).
    # A task of the same stage, channel and step still pending on a survivor (an earlier plan's, writing
    # other outputs) reads the same inputs: this one runs beside it, where the completion of the first
    # of the two leaves the inputs unburied for the second (lineage/lua/complete_task.lua).
    relaunched = {_key(t) for t in dead_pending}
    spread = sorted(live)
    twins = {_key(t): w for w in sorted(live) for t in view.ntt.get(w, frozenset())}

    def where(task: Task) -> WorkerId:
        if _key(task) in relaunched or graph.is_stateful(task.stage) or task.kind is TaskKind.SINK:
            return placement[task.ref]
        if _key(task) in twins:
            return twins[_key(task)]
        return spread[task.step % len(spread)]

    tasks = tuple((where(t), t) for t in sorted(planned.values(), key=_key))
    planned_rows = 0
    for _, task in tasks:
        planned_rows += task.source_rows
        planned_rows += sum(view.rows.get(o.key(), 0) for o in graph.inputs_of(task))
    return RecoveryPlan(
        dead=dead,
        epoch=epoch,
        placement=placement,
        moves=moves,
        tasks=tasks,
        replaced=tuple(t.id for t in dead_pending),
        resurrect=frozenset(resurrect),
        lost=frozenset(lost),
        buffered_rows=sum(view.rows.get(name, 0) for name in lost),
        planned_rows=planned_rows,
        rebuilt=tuple(rebuilt),
    )
