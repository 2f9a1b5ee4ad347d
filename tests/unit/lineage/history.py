"""A hand-written lineage history: tables as they would be after given task completions.

This is the in-memory picture the planner is computed on (``TablesView``); it
records completions the way the worker's completion script does, so that
tests can state a table state as "these tasks finished on these workers".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ftpipeline.dataflow.graph import Graph
from ftpipeline.lineage.cemetery import IntervalSet
from ftpipeline.lineage.naming import Channel, ObjectName, Task, TaskKind, WorkerId
from ftpipeline.lineage.placement import initial_placement
from ftpipeline.lineage.planner import TablesView
from ftpipeline.spec.load import parse_pipeline

PIPELINE = """
apiVersion: ftpipeline.io/v1alpha1
kind: FTPipeline
metadata: {name: t}
spec:
  image: x
  entryPoint: m.py
  workers: 2
  stages:
    - {name: events, parallelism: 2, source: {generator: {function: gen, rowsPerStep: 100}}}
    - {name: clean, parallelism: 2, inputs: [{stage: events}], transform: {function: f}}
    - name: agg
      parallelism: 2
      inputs: [{stage: clean}]
      aggregate: {keyBy: [k], aggregations: [{name: n, op: count}]}
    - {name: out, parallelism: 2, inputs: [{stage: agg}], sink: {parquet: {path: o}}}
"""

W0, W1, W2 = WorkerId("w0"), WorkerId("w1"), WorkerId("w2")


def graph(text: str = PIPELINE) -> Graph:
    return Graph(parse_pipeline(text, Path("/tmp"), check_entry_point=False))


@dataclass
class History:
    g: Graph
    workers: list[WorkerId]
    ntt: dict[WorkerId, set[Task]] = field(default_factory=dict)
    not_: dict[WorkerId, set[str]] = field(default_factory=dict)
    pt: dict[str, WorkerId] = field(default_factory=dict)
    ct: dict[str, IntervalSet] = field(default_factory=dict)
    lt: dict[str, Task] = field(default_factory=dict)
    rows: dict[str, int] = field(default_factory=dict)
    state: dict[Channel, int] = field(default_factory=dict)
    placement: dict[Channel, WorkerId] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.placement = initial_placement(self.g.channels(), self.workers)

    def task(self, stage: str, ch: int, step: int) -> Task:
        kind = self.g.task_kind(stage)
        ranges = ((ch, step * 100, step * 100 + 50),) if kind is TaskKind.SOURCE else None
        return Task(kind, stage, ch, step, ranges=ranges)

    def schedule(self, step: int) -> None:
        for t in self.g.step_tasks(step, {}):
            t = self.task(t.stage, t.channel, step)
            self.ntt.setdefault(self.placement[t.ref], set()).add(t)

    def complete(self, task: Task, rows: int = 10) -> None:
        worker = self.placement[task.ref]
        self.ntt[worker].discard(task)
        for obj in self.g.outputs_of(task):
            name = obj.key()
            self.not_.setdefault(worker, set()).add(name)
            self.pt[name] = worker
            self.lt[name] = task
            self.rows[name] = rows
        if not self.g.is_stateful(task.stage):
            for obj in self.g.inputs_of(task):
                self.ct.setdefault(obj.edge.key(), IntervalSet()).add(obj.seq)
        else:
            self.state[task.ref] = task.step

    def run_step(self, step: int) -> None:
        self.schedule(step)
        for t in self.g.step_tasks(step, {}):
            self.complete(self.task(t.stage, t.channel, step))

    def gc(self) -> None:
        """Drop consumed objects, as every worker's GC would."""
        for worker, names in self.not_.items():
            for name in list(names):
                obj = ObjectName.parse(name)
                if obj.seq in self.ct.get(obj.edge.key(), IntervalSet()):
                    names.discard(name)
                    self.pt.pop(name, None)

    def view(self) -> TablesView:
        return TablesView(
            ntt={w: frozenset(t) for w, t in self.ntt.items()},
            not_={w: frozenset(n) for w, n in self.not_.items()},
            pt=dict(self.pt),
            ct={k: IntervalSet(v) for k, v in self.ct.items()},
            lt=dict(self.lt),
            rows=dict(self.rows),
            placement=dict(self.placement),
            state_steps=dict(self.state),
        )
