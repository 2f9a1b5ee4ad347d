"""Attempts of one pipeline's run: a run that fails is tried again, with backoff, within its restart budget.

A worker that dies is replaced by the coordinator (``coordinator/members.py``);
this is the level above: the whole run failed — a task raised (an
unwritable output path, a bug in a stage), Redis or ZooKeeper could not be
reached, every worker was lost. The operator tries again, resuming from the
newest checkpoint, after a backoff that doubles per failure; the failures
count against the same budget as replacements (``spec.recovery.restartBudget``,
like a Job's ``backoffLimit``), and once it is spent the pipeline is Failed
with the last cause, instead of looping in ``Starting``:

    RUNNING  --attempt n fails, budget left--> RETRYING (status: attempt, lastFailure; Event)
    RETRYING --backoff passed--> STARTING attempt n+1 (resumed)
    RETRYING --budget spent--> FAILED (condition Failed=True; a spec change starts over)
    any attempt --a step past the newest one committed--> the failed attempts in a row start over
                 (failures within the window still count)
    a spec that cannot run (rejected by the runtime or the API server) --> FAILED at once

The budget is spent by ``maxRestarts`` failures within ``windowSeconds``, or
by ``maxRestarts`` failed attempts in a row with no step committed in any of
them, however slowly they fail: an attempt that takes longer than the window
to fail (pods to schedule, workers to time out) must not retry for ever.

Pure logic over a clock, so the policy is tested without a cluster.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ftpipeline.coordinator.restarts import RestartBudget, RestartPolicy


def policy_of(spec: Mapping[str, Any]) -> RestartPolicy:
    """The restart policy an FTPipeline's spec asks for (the CRD's defaults where it is silent)."""
    recovery = spec.get("recovery") or {}
    budget = recovery.get("restartBudget") or {}
    backoff = recovery.get("backoff") or {}
    d = RestartPolicy()
    return RestartPolicy(int(budget.get("maxRestarts", d.max_restarts)), float(budget.get("windowSeconds", d.window_s)),
                         int(backoff.get("initialMs", d.initial_ms)), int(backoff.get("maxMs", d.max_ms)),
                         int(backoff.get("jitterPercent", d.jitter_percent)))


@dataclass(frozen=True)
class Verdict:
    attempt: int              # the attempt that failed
    retry_in: float | None    # seconds until the next attempt; None: give up
    message: str              # one line: the attempt, the cause, what happens next


class Attempts:
    def __init__(self, policy: RestartPolicy, clock: Callable[[], float], seed: int = 0) -> None:
        self.policy = policy
        self.clock = clock
        self.attempt = 1
        self._budget = RestartBudget(policy, seed)
        self._since_progress = 0  # failed attempts since a step last committed

    def progressed(self) -> None:
        """A step committed: the failures before it no longer count in a row."""
        self._since_progress = 0

    def failed(self, cause: str) -> Verdict:
        """Attempt ``self.attempt`` failed with ``cause`` (one line): retry after a backoff, or give up."""
        now, attempt = self.clock(), self.attempt
        used = self._budget.in_window(now) + 1
        p = self.policy
        if used > p.max_restarts:
            return Verdict(attempt, None, f"attempt {attempt} failed: {cause}; restart budget spent ({used} failures "
                                          f"within {p.window_s:.0f} s, spec.recovery.restartBudget.maxRestarts: "
                                          f"{p.max_restarts})")
        if self._since_progress + 1 > p.max_restarts:
            return Verdict(attempt, None, f"attempt {attempt} failed: {cause}; restart budget spent "
                                          f"({self._since_progress + 1} failed attempts in a row with no step "
                                          f"committed, spec.recovery.restartBudget.maxRestarts: {p.max_restarts})")
        delay = self._budget.on_loss(now)
        self._since_progress += 1
        self.attempt += 1
        return Verdict(attempt, delay, f"attempt {attempt} failed: {cause}; attempt {attempt + 1} in {delay:.0f} s "
                                       f"({used} of {p.max_restarts} restarts used within {p.window_s:.0f} s)")

    def fatal(self, cause: str) -> Verdict:
        """A failure no retry can fix (the spec itself): give up now."""
        return Verdict(self.attempt, None, cause)
