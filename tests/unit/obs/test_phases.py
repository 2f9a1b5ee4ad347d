"""The step breakdown: phases between the coordinator's marks, tasks' parts summed per step."""

from __future__ import annotations

from ftpipeline.obs.phases import POINTS, StepPhases


def _marked(phases: StepPhases, step: int, start: float, gaps: list[float]) -> None:
    at = start
    for point, gap in zip(POINTS, [0.0, *gaps]):
        at += gap
        phases.mark(step, point, at)


def test_a_released_step_adds_its_phases_and_its_tasks_parts() -> None:
    phases = StepPhases()
    _marked(phases, 1, 10.0, [0.01, 0.02, 0.5, 0.03, 0.04])
    phases.task(1, {"read": 0.1, "spark": 0.2, "jobs": 0.5, "record": 0.01})
    phases.task(1, {"read": 0.1, "spark": 0.2, "jobs": 0.5})
    _marked(phases, 2, 11.0, [0.03, 0.02, 0.3, 0.01, 0.02])
    phases.close(1)
    phases.close(2)
    got = phases.summary()
    assert got["steps"] == 2
    assert abs(got["phases"]["tasks"] - 0.4) < 1e-9 and abs(got["phases"]["decide"] - 0.02) < 1e-9
    assert got["tasks"]["tasks"] == 1.0 and got["tasks"]["jobs"] == 0.5 and abs(got["tasks"]["read"] - 0.1) < 1e-9


def test_a_step_missing_a_mark_or_caught_by_a_recovery_is_left_out() -> None:
    phases = StepPhases()
    _marked(phases, 1, 0.0, [0.1, 0.1, 0.1, 0.1, 0.1])
    phases.task(1, {"spark": 5.0})
    phases.forget_open()  # a worker was lost while step 1 was in flight
    phases.mark(1, "released", 9.0)
    phases.close(1)
    phases.mark(2, "trigger", 1.0)
    phases.close(2)
    assert phases.summary()["steps"] == 0 and phases.summary()["tasks"]["spark"] == 0.0
