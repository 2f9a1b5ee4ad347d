"""What each step took and did, counted as the run goes, for its result (``RunResult``) and its metrics.

The coordinator's decisions never read these: they are the run's account of
itself (a step's time from trigger to release, when each release came, which
worker ran how many tasks, how many rows recovery read again), kept apart so
the protocol code stays about the protocol. One exception reads them back:
fault injection's ``--kill-after-tasks`` waits for a count of a step's tasks
(``done_in_step``).
"""

from __future__ import annotations


class StepStats:
    def __init__(self) -> None:
        self._started: dict[int, float] = {}   # step -> when it was triggered
        self._rows: dict[int, int] = {}        # step -> source offsets it reads
        self._done: dict[int, int] = {}        # step -> tasks of it done
        self.step_seconds: list[float] = []    # each released step's time from trigger to release
        self.commit_at: list[float] = []       # each release, in seconds since the run started
        self.tasks_by_worker: dict[str, int] = {}
        self.recomputed_rows = 0               # rows read again by recovery: re-run tasks and replayed steps

    def started(self, step: int, now: float, rows: int) -> None:
        self._started[step], self._rows[step] = now, rows

    def task_done(self, step: int, worker: str) -> None:
        self.tasks_by_worker[worker] = self.tasks_by_worker.get(worker, 0) + 1
        self._done[step] = self._done.get(step, 0) + 1

    def done_in_step(self, step: int) -> int:
        return self._done.get(step, 0)

    def released(self, step: int, now: float, since_start: float) -> tuple[float, int]:
        """``step`` is released: its time from trigger to release, and the offsets it read."""
        elapsed = now - self._started.pop(step, now)
        self.step_seconds.append(elapsed)
        self.commit_at.append(since_start)
        return elapsed, self._rows.pop(step, 0)
