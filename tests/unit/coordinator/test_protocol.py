"""Coordinator start-up: resume workers that stayed up at one step, otherwise create afresh."""

from __future__ import annotations

from ftpipeline.coordinator.protocol import Create, Resume, startup_decision


def test_empty_mapping_creates() -> None:
    assert startup_decision({}) == Create()


def test_all_closed_creates_without_shutdowns() -> None:
    states = {"w0": {"state": "closed", "step": 0}, "w1": {"state": "closed", "step": 0}}
    assert startup_decision(states) == Create()


def test_all_open_at_the_same_step_resumes() -> None:
    states = {"w0": {"state": "open", "step": 7}, "w1": {"state": "open", "step": 7}}
    assert startup_decision(states) == Resume(7)


def test_mixed_open_and_running_at_the_same_step_resumes() -> None:
    states = {
        "w0": {"state": "open", "step": 4},
        "w1": {"state": "running", "step": 4},
        "w2": {"state": "running", "step": 4},
    }
    assert startup_decision(states) == Resume(4)


def test_resume_step_is_an_int() -> None:
    decision = startup_decision({"w0": {"state": "running", "step": "12"}})
    assert decision == Resume(12)
    assert isinstance(decision, Resume) and type(decision.step) is int


def test_different_steps_create_and_shut_down_the_non_closed() -> None:
    states = {
        "w2": {"state": "running", "step": 5},
        "w0": {"state": "open", "step": 4},
        "w1": {"state": "closed", "step": 0},
    }
    assert startup_decision(states) == Create(shutdown_first=("w0", "w2"))


def test_one_closed_worker_among_open_ones_creates() -> None:
    states = {"w0": {"state": "open", "step": 3}, "w1": {"state": "closed", "step": 3}}
    assert startup_decision(states) == Create(shutdown_first=("w0",))


def test_all_up_but_at_different_steps_creates_and_shuts_all_down() -> None:
    states = {"w1": {"state": "running", "step": 4}, "w0": {"state": "open", "step": 3}}
    assert startup_decision(states) == Create(shutdown_first=("w0", "w1"))
