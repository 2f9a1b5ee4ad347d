"""Attempts: a failing run is retried with a growing backoff within its budget, then given up, naming the cause."""

from __future__ import annotations

from ftpipeline.coordinator.restarts import RestartPolicy
from ftpipeline_operator.attempts import Attempts, policy_of


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


CAUSE = "task sink:output.2:1@0 failed on worker w2: PermissionError: [Errno 13 EACCES] Permission denied: '/data/out'"


def test_failures_are_retried_with_backoff_until_the_budget_is_spent() -> None:
    clock = Clock()
    attempts = Attempts(RestartPolicy(max_restarts=2, window_s=600, initial_ms=1000, max_ms=60_000,
                                      jitter_percent=0), clock)
    first = attempts.failed(CAUSE)
    assert (first.attempt, first.retry_in) == (1, 1.0)
    assert first.message == f"attempt 1 failed: {CAUSE}; attempt 2 in 1 s (1 of 2 restarts used within 600 s)"
    clock.now += 30
    second = attempts.failed(CAUSE)
    assert (second.attempt, second.retry_in) == (2, 2.0)
    clock.now += 30
    last = attempts.failed(CAUSE)
    assert last.attempt == 3 and last.retry_in is None
    assert "\n" not in last.message and "/data/out" in last.message
    assert last.message.endswith("restart budget spent (3 failures within 600 s, "
                                 "spec.recovery.restartBudget.maxRestarts: 2)")


def test_failures_older_than_the_window_no_longer_count_once_a_step_committed() -> None:
    clock = Clock()
    attempts = Attempts(RestartPolicy(max_restarts=1, window_s=60, jitter_percent=0), clock)
    assert attempts.failed("x").retry_in is not None
    attempts.progressed()
    clock.now += 61
    assert attempts.failed("x").retry_in is not None
    assert attempts.failed("x").retry_in is None


def test_attempts_that_fail_slower_than_the_window_still_spend_the_budget() -> None:
    """Each attempt takes longer than the window to fail and none commits a step: the loop ends anyway."""
    clock = Clock()
    attempts = Attempts(RestartPolicy(max_restarts=3, window_s=600, jitter_percent=0), clock)
    verdicts = []
    for _ in range(4):
        clock.now += 900
        verdicts.append(attempts.failed("x"))
    assert [v.retry_in is None for v in verdicts] == [False, False, False, True]
    assert verdicts[-1].message.endswith("restart budget spent (4 failed attempts in a row with no step committed, "
                                         "spec.recovery.restartBudget.maxRestarts: 3)")


def test_the_policy_comes_from_the_spec_with_the_crd_defaults() -> None:
    assert policy_of({}) == RestartPolicy()
    p = policy_of({"recovery": {"restartBudget": {"maxRestarts": 0}, "backoff": {"initialMs": 10, "maxMs": 20}}})
    assert (p.max_restarts, p.window_s, p.initial_ms, p.max_ms) == (0, 600, 10, 20)
    assert Attempts(p, Clock()).failed("x").retry_in is None, "a budget of 0 gives up at the first failure"
