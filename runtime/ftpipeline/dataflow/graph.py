"""The dataflow of a pipeline as channels and named objects.

A validated ``PipelineSpec`` lists stages and edges; this module answers the
questions the runtime asks of them: in which order stages run within a step,
which objects a task reads and writes (their names are fully determined by the
task and the edges, which is why lineage can be replayed anywhere), and which
stages keep state.

The runtime asks them of the *physical* pipeline (``Graph.physical``: chains
of one-to-one stages as single stages, ``dataflow/chains.py``); the oracle
asks them of the pipeline as written.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cached_property

from ftpipeline.dataflow.chains import physical
from ftpipeline.lineage.naming import Channel, ObjectName, Slot, SlotRange, Task, TaskKind, slot_channel
from ftpipeline.spec.model import Edge, Partition, PipelineSpec, StageKind, StageSpec

_TASK_KIND = {
    StageKind.SOURCE: TaskKind.SOURCE,
    StageKind.TRANSFORM: TaskKind.TRANSFORM,
    StageKind.AGGREGATE: TaskKind.AGGREGATE,
    StageKind.DEDUPLICATE: TaskKind.AGGREGATE,  # a keyed stateful task, as an aggregate's
    StageKind.JOIN: TaskKind.AGGREGATE,
    StageKind.PROCESS: TaskKind.AGGREGATE,
    StageKind.LOOKUP: TaskKind.TRANSFORM,  # stateless: the table's version is the step's
    StageKind.SINK: TaskKind.SINK,
}


def _own_hold(stage: StageSpec) -> int:
    join = stage.join
    return max(join.upper_us, -join.lower_us, 0) if join is not None else 0


class Graph:
    def __init__(self, spec: PipelineSpec) -> None:
        self.spec = spec
        self._stages = {s.name: s for s in spec.stages}
        self._down: dict[str, list[Edge]] = {s.name: [] for s in spec.stages}
        for stage in spec.stages:
            for edge in stage.inputs:
                self._down[edge.upstream].append(edge)

    @classmethod
    def physical(cls, spec: PipelineSpec) -> Graph:
        """The graph the runtime plans, runs and recovers: one stage per chain."""
        return cls(physical(spec))

    # --- structure ---------------------------------------------------------
    def stage(self, name: str) -> StageSpec:
        return self._stages[name]

    @cached_property
    def order(self) -> tuple[str, ...]:
        """Stages in topological order (stable: ties keep declaration order)."""
        done: list[str] = []
        remaining = [s.name for s in self.spec.stages]
        while remaining:
            for name in remaining:
                if all(e.upstream in done for e in self._stages[name].inputs):
                    done.append(name)
                    remaining.remove(name)
                    break
            else:  # the loader rejects cycles; this guards direct construction
                raise ValueError(f"cycle among {remaining}")
        return tuple(done)

    def rank(self, stage: str) -> int:
        return self.order.index(stage)

    def channels(self) -> list[Channel]:
        return [Channel(s.name, i) for s in self.spec.stages for i in range(s.parallelism)]

    def downstream(self, stage: str) -> list[Edge]:
        return list(self._down[stage])

    def sources(self) -> list[StageSpec]:
        return [s for s in self.spec.stages if s.kind is StageKind.SOURCE]

    def sinks(self) -> list[StageSpec]:
        """Every sink, including those run inside a chain."""
        return [m for s in self.spec.stages for m in s.members if m.kind is StageKind.SINK]

    def is_stateful(self, stage: str) -> bool:
        return self._stages[stage].keeps_state

    def on_event_time(self, stage: str) -> bool:
        """Does a task of ``stage`` need the watermark of its step (a window, a deduplication, a join)?"""
        s = self._stages[stage]
        return (s.aggregate is not None and s.aggregate.window is not None) or s.deduplicate is not None or (
            s.join is not None) or s.process is not None

    def orders_downstream(self, stage: str) -> bool:
        """Does an operator with event time take ``stage``'s rows, directly or through stateless stages, so
        that which of them came before a step's advance matters (``eventtime/order.py``)?"""
        return self._ordered[stage]

    @cached_property
    def _ordered(self) -> dict[str, bool]:
        out: dict[str, bool] = {}
        for name in reversed(self.order):
            out[name] = any(self.on_event_time(e.downstream) or (not self.is_stateful(e.downstream)
                                                                 and out[e.downstream])
                            for e in self._down[name])
        return out

    def held_back_us(self, stage: str) -> int:
        """How far behind the step's watermark the watermark ``stage`` takes is (us): each interval join
        upstream holds the watermark it passes on back by how long a row may wait there for its partner,
        ``max(upper, -lower)`` (Flink's interval join does), so the rows it emits are not behind it downstream;
        over several paths, the longest hold."""
        return self._holds[stage]

    @cached_property
    def _holds(self) -> dict[str, int]:
        holds: dict[str, int] = {}
        for name in self.order:
            holds[name] = max((holds[e.upstream] + _own_hold(self._stages[e.upstream])
                               for e in self._stages[name].inputs), default=0)
        return holds

    def on_processing_time(self, stage: str) -> bool:
        """Does a task of ``stage`` need the processing time of its step (a keyed function)?"""
        return self._stages[stage].process is not None

    def task_kind(self, stage: str) -> TaskKind:
        return _TASK_KIND[self._stages[stage].kind]

    # --- objects -----------------------------------------------------------
    def targets(self, edge: Edge, channel: int) -> range:
        if edge.partition is Partition.FORWARD:
            return range(channel, channel + 1)
        return range(self._stages[edge.downstream].parallelism)

    def _sources_for(self, edge: Edge, channel: int) -> range:
        if edge.partition is Partition.FORWARD:
            return range(channel, channel + 1)
        return range(self._stages[edge.upstream].parallelism)

    def inputs_of(self, task: Task) -> list[ObjectName]:
        if task.kind is TaskKind.SOURCE:
            return []
        out = []
        for edge in self._stages[task.stage].inputs:
            pf = edge.partition.number
            for step in task.steps:
                for uc in self._sources_for(edge, task.channel):
                    out.append(ObjectName(edge.upstream, uc, step, task.stage, pf, task.channel))
        return out

    def outputs_of(self, task: Task) -> list[ObjectName]:
        if task.kind in (TaskKind.REBUILD, TaskKind.SINK):
            return []
        out = []
        for edge in self._down[task.stage]:
            pf = edge.partition.number
            for tc in self.targets(edge, task.channel):
                out.append(ObjectName(task.stage, task.channel, task.step, edge.downstream, pf, tc))
        return out

    def ranges(self, offsets: Mapping[Slot, tuple[int, int]], stage: str, channel: int) -> tuple[SlotRange, ...]:
        """What source channel ``channel`` of ``stage`` reads of a step recorded with ``offsets``: the
        ranges of its slots, in slot order."""
        parallelism = self._stages[stage].parallelism
        return tuple(sorted((slot.index, lo, hi) for slot, (lo, hi) in offsets.items()
                            if slot.stage == stage and slot_channel(slot.index, parallelism) == channel))

    def step_tasks(self, step: int, offsets: Mapping[Slot, tuple[int, int]]) -> list[Task]:
        """The tasks of one ordinary step, in topological order; ``offsets``: of every source slot."""
        tasks = []
        for name in self.order:
            stage = self._stages[name]
            kind = self.task_kind(name)
            for ch in range(stage.parallelism):
                ranges = self.ranges(offsets, name, ch) if kind is TaskKind.SOURCE else None
                tasks.append(Task(kind, name, ch, step, ranges=ranges))
        return tasks
