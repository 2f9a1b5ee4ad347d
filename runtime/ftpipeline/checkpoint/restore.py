"""Bringing a restored pipeline back to its cut: which tasks to run after ``open``.

A committed checkpoint is a cut, not necessarily a global step boundary:
with pipelined steps, stateful channel X's snapshot reflects steps up to
``k_X`` <= ``boundary``, the sinks have released up to ``gt_last`` >=
``boundary``, and older-epoch messages that crossed the cut are saved as
in-flight objects. After every worker reopened it, each stateful channel
must be brought from ``k_X`` to ``boundary`` (its tasks for those steps), and
each of those tasks' inputs must exist: an in-flight object is read from
checkpoint storage; anything else is regenerated from its producer — a
stateless task, recursively, down to sources, which re-read the offsets the
step log recorded. That is lineage planning over the checkpoint instead of
over the lost worker's buffer, so it is the same recursion as
``lineage.planner`` with the cut as the set of present objects.

In lockstep every ``k_X`` equals ``boundary`` and there are no in-flight
objects: the plan is empty and the pipeline simply replays from
``boundary + 1``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from ftpipeline.lineage.naming import Channel, ObjectName, SlotRange, Task, TaskKind
from ftpipeline.lineage.planner import PlanningError, TaskGraph


@dataclass(frozen=True)
class Cut:
    boundary: int
    states: Mapping[Channel, int]      # stateful channel -> last step in its snapshot
    gt_last: int
    inflight: frozenset[str]


def plan_restore(
    graph: TaskGraph,
    cut: Cut,
    kind_of: Callable[[str], TaskKind],
    ranges_of: Callable[[Channel, int], tuple[SlotRange, ...]],
    epoch: int,
) -> list[Task]:
    planned: dict[tuple[str, int, int], Task] = {}

    def add(task: Task, emit: str | None) -> bool:
        key = (task.stage, task.channel, task.step)
        existing = planned.get(key)
        if existing is None:
            planned[key] = replace(task, emit=frozenset({emit}) if emit else frozenset())
            return True
        if emit is not None and existing.emit is not None and emit not in existing.emit:
            planned[key] = replace(existing, emit=existing.emit | {emit})
        return False

    work: list[Task] = []
    for ch, k in sorted(cut.states.items()):
        for step in range(k + 1, cut.boundary + 1):
            task = Task(kind_of(ch.stage), ch.stage, ch.index, step, recovery=True, epoch=epoch)
            if add(task, None):
                work.append(planned[(ch.stage, ch.index, step)])

    def need(name: str) -> None:
        if name in cut.inflight:
            return
        obj = ObjectName.parse(name)
        producer = Channel(obj.actor, obj.channel)
        kind = kind_of(obj.actor)
        if kind is TaskKind.AGGREGATE:
            if obj.seq <= cut.states.get(producer, 0):
                raise PlanningError(f"{name} is folded into {producer.key()}'s snapshot but not saved in flight")
            add(Task(kind, obj.actor, obj.channel, obj.seq, recovery=True, epoch=epoch), name)
            return
        ranges = ranges_of(producer, obj.seq) if kind is TaskKind.SOURCE else None
        task = Task(kind, obj.actor, obj.channel, obj.seq, ranges=ranges, recovery=True, epoch=epoch)
        if add(task, name):
            work.append(planned[(obj.actor, obj.channel, obj.seq)])

    while work:
        task = work.pop()
        for obj in graph.inputs_of(task):
            need(obj.key())
    return sorted(planned.values(), key=lambda t: (t.step, t.stage, t.channel))
