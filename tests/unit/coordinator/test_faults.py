"""FaultPlan: when to kill a worker, and which one (named or drawn from a seed)."""

from __future__ import annotations

import pytest

from ftpipeline.coordinator.faults import FaultPlan
from ftpipeline.lineage.naming import WorkerId

WORKERS = [WorkerId("w0"), WorkerId("w1"), WorkerId("w2")]


def test_at_step_after_tasks() -> None:
    plan = FaultPlan(at_step=3, after_tasks=2)
    assert not plan.due(step=2, tasks_done_in_step=5, seconds=100.0)
    assert not plan.due(step=3, tasks_done_in_step=0, seconds=100.0)
    assert not plan.due(step=3, tasks_done_in_step=1, seconds=100.0)
    assert plan.due(step=3, tasks_done_in_step=2, seconds=0.0)
    assert plan.due(step=3, tasks_done_in_step=3, seconds=0.0)
    # pipelined: later steps may already run; the count is of step 3's tasks
    assert plan.due(step=4, tasks_done_in_step=3, seconds=0.0)
    assert not plan.due(step=4, tasks_done_in_step=1, seconds=0.0)


def test_at_step_defaults_to_after_one_task() -> None:
    plan = FaultPlan(at_step=1)
    assert not plan.due(1, 0, 0.0)
    assert plan.due(1, 1, 0.0)


def test_after_seconds() -> None:
    plan = FaultPlan(after_seconds=2.5)
    assert not plan.due(step=9, tasks_done_in_step=9, seconds=2.4)
    assert plan.due(step=1, tasks_done_in_step=0, seconds=2.5)
    assert plan.due(step=1, tasks_done_in_step=0, seconds=10.0)


def test_no_plan_is_never_due() -> None:
    plan = FaultPlan()
    assert not plan.due(1, 100, 1e9)


def test_fired_prevents_a_second_kill() -> None:
    plan = FaultPlan(at_step=2, after_tasks=1)
    assert plan.due(2, 1, 0.0)
    plan.fired = True
    assert not plan.due(2, 1, 0.0)
    assert not plan.due(2, 5, 0.0)

    timed = FaultPlan(after_seconds=1.0)
    timed.fired = True
    assert not timed.due(1, 0, 5.0)


def test_named_victim() -> None:
    assert FaultPlan(worker=WorkerId("w1")).victim(WORKERS) == "w1"


def test_named_victim_must_exist() -> None:
    with pytest.raises(ValueError, match="w7.*no such worker.*w0, w1, w2"):
        FaultPlan(worker=WorkerId("w7")).victim(WORKERS)


def test_seeded_victim_is_deterministic() -> None:
    for seed in range(20):
        first = FaultPlan(seed=seed).victim(WORKERS)
        assert first in WORKERS
        assert FaultPlan(seed=seed).victim(list(reversed(WORKERS))) == first  # order of the list does not matter
        assert FaultPlan(seed=seed).victim(WORKERS) == first


def test_seeded_victims_cover_different_workers() -> None:
    victims = {FaultPlan(seed=seed).victim(WORKERS) for seed in range(50)}
    assert victims == set(WORKERS)


def test_during_checkpoint_fires_only_while_checkpointing() -> None:
    plan = FaultPlan(during_checkpoint=True)
    assert not plan.due(step=1, tasks_done_in_step=5, seconds=100.0, checkpointing=False)
    assert not plan.due(step=1, tasks_done_in_step=5, seconds=100.0)  # checkpointing defaults to False
    assert plan.due(step=1, tasks_done_in_step=0, seconds=0.0, checkpointing=True)


def test_during_checkpoint_waits_for_at_step() -> None:
    plan = FaultPlan(at_step=4, during_checkpoint=True)
    assert not plan.due(step=3, tasks_done_in_step=9, seconds=0.0, checkpointing=True)
    assert not plan.due(step=4, tasks_done_in_step=9, seconds=0.0, checkpointing=False)
    assert plan.due(step=4, tasks_done_in_step=0, seconds=0.0, checkpointing=True)
    # at or after the step: a checkpoint that starts later still gets the kill
    assert plan.due(step=7, tasks_done_in_step=0, seconds=0.0, checkpointing=True)


def test_during_checkpoint_ignores_after_tasks_and_after_seconds() -> None:
    plan = FaultPlan(at_step=2, after_tasks=3, after_seconds=50.0, during_checkpoint=True)
    assert plan.due(step=2, tasks_done_in_step=0, seconds=0.0, checkpointing=True)
    assert not plan.due(step=2, tasks_done_in_step=3, seconds=60.0, checkpointing=False)


def test_during_checkpoint_fires_once() -> None:
    plan = FaultPlan(during_checkpoint=True)
    assert plan.due(1, 0, 0.0, checkpointing=True)
    plan.fired = True
    assert not plan.due(1, 0, 0.0, checkpointing=True)
    assert not plan.due(5, 3, 9.0, checkpointing=True)


def test_checkpointing_does_not_change_plans_without_the_flag() -> None:
    plan = FaultPlan(at_step=3, after_tasks=2)
    assert not plan.due(step=3, tasks_done_in_step=1, seconds=0.0, checkpointing=True)
    assert plan.due(step=3, tasks_done_in_step=2, seconds=0.0, checkpointing=True)
    assert not plan.due(step=5, tasks_done_in_step=1, seconds=0.0, checkpointing=True)
    assert not FaultPlan().due(1, 100, 1e9, checkpointing=True)
