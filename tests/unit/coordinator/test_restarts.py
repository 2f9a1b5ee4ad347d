"""RestartBudget: backoff doubles with jitter, is capped, and the budget is counted within a window."""

from __future__ import annotations

import pytest

from ftpipeline.coordinator.restarts import BudgetExhausted, RestartBudget, RestartPolicy


def test_backoff_doubles_up_to_the_cap_within_the_jitter() -> None:
    budget = RestartBudget(RestartPolicy(max_restarts=10, initial_ms=1000, max_ms=5000, jitter_percent=20), seed=3)
    delays = [budget.on_loss(float(t)) for t in range(6)]
    for got, base in zip(delays, [1.0, 2.0, 4.0, 5.0, 5.0, 5.0], strict=True):
        assert base * 0.8 <= got <= base * 1.2


def test_jitter_spreads_pipelines_that_fail_together() -> None:
    policy = RestartPolicy(initial_ms=1000, jitter_percent=20)
    firsts = {RestartBudget(policy, seed=s).on_loss(0.0) for s in range(20)}
    assert len(firsts) == 20


def test_no_jitter_is_exact() -> None:
    budget = RestartBudget(RestartPolicy(initial_ms=500, max_ms=60_000, jitter_percent=0))
    assert [budget.on_loss(0.0) for _ in range(3)] == [0.5, 1.0, 2.0]


def test_the_budget_is_counted_within_the_window() -> None:
    budget = RestartBudget(RestartPolicy(max_restarts=2, window_s=60, jitter_percent=0))
    budget.on_loss(0.0)
    budget.on_loss(10.0)
    with pytest.raises(BudgetExhausted, match="3 worker losses within 60 s exceed the restart budget of 2"):
        budget.on_loss(20.0)
    # the first two losses have left the window: the budget is whole again and the backoff starts over
    assert budget.on_loss(75.0) == 1.0
