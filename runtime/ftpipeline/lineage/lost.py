"""The work a worker loss destroys, measured on the tables, apart from any recovery plan.

A recovery is judged by how much it re-runs against how much was really lost.
Everything up to the newest committed checkpoint (its *cut*) survives any
loss: stateful channels have snapshots of it and its in-flight messages are
saved. What a lost worker did after the cut did not survive, nor what it
still had to do. So the **lost work** of a loss is, in rows read:

    every task of a channel placed on the lost worker, of a step after the cut,
    that wrote an object (its lineage is in LT): it read its inputs' rows, or
    its source range;
  + every fold into a stateful channel of the lost worker after that channel's
    snapshot in the cut (its state died with it, whether or not the fold
    wrote objects: a stateful stage chained with its sink writes none);
  + every task pending on the lost worker (its NTT): the rows its inputs
    written so far hold, or its source range.

Other tasks that write nothing (sinks) are not counted: what they did is in
the sink, which survives. The planner never sees this figure; the coordinator
records it beside the rows the recovery really re-read (``recomputed_rows``),
and ``bench/recompute.py`` prints their ratio: lineage recovery should re-read
about the lost work, a checkpoint rollback re-reads every worker's steps since
the cut.
"""

from __future__ import annotations

from collections.abc import Mapping

from ftpipeline.lineage.naming import Channel, Task, TaskKind, WorkerId
from ftpipeline.lineage.planner import TablesView, TaskGraph


def rows_read(graph: TaskGraph, view: TablesView, task: Task) -> int:
    """Rows ``task`` reads: its source range, or its inputs' recorded rows."""
    if task.ranges is not None:
        return task.source_rows
    return sum(view.rows.get(o.key(), 0) for o in graph.inputs_of(task))


def lost_work(graph: TaskGraph, view: TablesView, dead: WorkerId, cut: int,
              snapshots: Mapping[Channel, int] | None = None) -> int:
    """Rows read by the tasks whose work died with ``dead`` (see the module's definition); ``snapshots``:
    the step of each stateful channel's snapshot in the cut (none: it starts from nothing)."""
    mine = {ch for ch, worker in view.placement.items() if worker == dead}
    tasks: dict[tuple[int, str, int], Task] = {}  # one task per (stage, channel, step) it covers

    def add(task: Task) -> None:
        tasks.setdefault((task.step, task.stage, task.channel), task)

    for ch in sorted(mine):
        if graph.is_stateful(ch.stage):
            for step in range((snapshots or {}).get(ch, 0) + 1, view.state_steps.get(ch, 0) + 1):
                add(Task(TaskKind.AGGREGATE, ch.stage, ch.index, step))
    for task in view.lt.values():
        if task.step > cut and task.ref in mine and task.first == task.step:
            add(task)
    for task in view.ntt.get(dead, frozenset()):
        add(task)
    return sum(rows_read(graph, view, t) for t in tasks.values())
