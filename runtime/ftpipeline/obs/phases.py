"""Where a step's time goes: its phases on the coordinator, and its tasks' parts on the workers.

Why: a step's latency is a sum of fixed costs (deciding it, reaching the
workers, a Spark job per task, objects per edge, lineage writes, the
command log, the barrier) and of work that grows with its rows. Which
one sets the pace depends on the pipeline's shape, and only a breakdown
measured on the run says which to remove. ``ftpipeline run`` puts it in its
summary (``phases``) and ``bench/vs_spark.py`` prints it.

A step, on the coordinator (each phase ends where the next begins)::

    trigger --decide--> assigned --dispatch--> sent --tasks--> all done
            --commit--> its commit in the command log --release--> released

- decide: the step log record, the command log append (sent, not awaited),
  the tasks written to the workers' task tables;
- dispatch: the ``step`` call to every worker;
- tasks: until the last task's completion reached the coordinator;
- commit: until the commit record is in ZooKeeper (overlaps the next step);
- release: the barrier's release call.

A task, on its worker (summed over the step's tasks, so it is work, not
wall time; tasks of different workers run side by side): ``read`` (inputs
or the source), ``operator`` (a keyed stage's state), ``spark`` (its
chain's Spark job; a job shared by a group of tasks is split among them,
and counted as a fraction in ``jobs``), ``write`` (split per channel and
buffered), ``record`` (the sidecar's lineage write). A recovery's steps
are left out: they measure the recovery, not the pipeline.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

PHASES = ("decide", "dispatch", "tasks", "commit", "release")
POINTS = ("trigger", "assigned", "sent", "done", "logged", "released")
TASK_PARTS = ("read", "operator", "spark", "write", "record")


class StepPhases:
    """The coordinator's marks per step and the tasks' reported parts, summed over closed steps."""

    def __init__(self) -> None:
        self._marks: dict[int, dict[str, float]] = {}
        self._parts: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        self.phase_s: dict[str, float] = dict.fromkeys(PHASES, 0.0)
        self.part_s: dict[str, float] = dict.fromkeys((*TASK_PARTS, "jobs", "tasks"), 0.0)
        self.steps = 0

    def mark(self, step: int, point: str, now: float) -> None:
        """``step`` reached ``point`` (one of ``POINTS``) at ``now``; a later mark of it wins."""
        self._marks.setdefault(step, {})[point] = now

    def task(self, step: int, parts: dict[str, Any]) -> None:
        """A task of ``step`` completed, with its parts (seconds) and its share of a Spark job."""
        into = self._parts[step]
        for name in (*TASK_PARTS, "jobs"):
            into[name] += float(parts.get(name, 0.0))
        into["tasks"] += 1

    def forget_open(self) -> None:
        """A recovery began: the steps in flight measure it, not the pipeline."""
        self._marks.clear()
        self._parts.clear()

    def close(self, step: int) -> None:
        """``step`` was released: add its phases if every point was marked in order."""
        marks = self._marks.pop(step, {})
        parts = self._parts.pop(step, {})
        times = [marks.get(p) for p in POINTS]
        if any(t is None for t in times):
            return
        spans = [b - a for a, b in zip(times, times[1:])]  # type: ignore[operator]
        if min(spans) < 0:
            return
        for phase, seconds in zip(PHASES, spans):
            self.phase_s[phase] += seconds
        for name, value in parts.items():
            self.part_s[name] += value
        self.steps += 1

    def summary(self) -> dict[str, Any]:
        """Means per step: ``phases`` (wall seconds), ``tasks`` (work seconds per part, tasks and Spark jobs)."""
        n = max(self.steps, 1)
        return {"steps": self.steps,
                "phases": {k: v / n for k, v in self.phase_s.items()},
                "tasks": {k: v / n for k, v in self.part_s.items()}}
