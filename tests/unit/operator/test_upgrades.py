"""A spec change to a running pipeline: checkpoint, stop, start the new spec; roll back when it is not healthy."""

from __future__ import annotations

from typing import Any

import pytest

from ftpipeline_operator.resolve import Unrunnable
from ftpipeline_operator.runner import PipelineRunner, Rest
from ftpipeline_operator.upgrades import CHECKPOINT_WAIT_S, Upgrades, run_spec, spec_digest
from tests.unit.operator.test_runner import pipeline, runner


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


STABLE = {"workers": 2, "image": "app:1", "stages": []}


def running(clock: Clock, **upgrade: Any) -> Upgrades:
    u = Upgrades({"lifecycleState": "Running", "lastStableSpec": STABLE}, clock)
    u.policy = u.policy.of({"upgrade": upgrade})
    return u


def test_only_fields_that_change_what_runs_are_upgrades() -> None:
    u = Upgrades({}, Clock())
    assert not u.is_upgrade(STABLE, {**STABLE, "suspend": True, "checkpointNonce": "x", "restartNonce": "y",
                                     "progressDeadlineSeconds": 5, "upgrade": {"mode": "stateless"}})
    assert u.is_upgrade(STABLE, {**STABLE, "image": "app:2"})
    assert run_spec({**STABLE, "suspend": True}) == STABLE


def test_a_running_pipeline_stops_for_its_upgrade_once_the_checkpoint_is_in_or_after_a_wait() -> None:
    clock = Clock()
    u = running(clock)
    new = {**STABLE, "image": "app:2"}
    before = clock.now - 1  # a checkpoint committed before the request is not the upgrade's
    assert u.changed(new, running=True) and u.state == "Upgrading"
    assert not u.stop_now(True, None) and not u.stop_now(True, before)
    assert u.stop_now(True, clock.now)
    assert not u.stop_now(True, clock.now)  # asked once
    u.changed({**new, "image": "app:3"}, running=True)
    clock.now += CHECKPOINT_WAIT_S
    assert u.stop_now(True, None)  # the newest checkpoint serves
    u.changed({**new, "image": "app:4"}, running=True)
    assert u.stop_now(False, None)  # no checkpoints: the step log alone


def test_stateless_stops_at_once_and_a_stopped_pipeline_just_deploys_the_new_spec() -> None:
    u = running(Clock())
    assert u.changed({**STABLE, "image": "app:2", "upgrade": {"mode": "stateless"}}, running=True)
    assert u.stop_now(True, None)
    v = running(Clock())  # suspended, failed or backing off: the next attempt runs it, on trial
    assert not v.changed({**STABLE, "image": "app:2"}, running=False) and v.state == "Upgrading"
    w = Upgrades({}, Clock())  # nothing stable yet: nothing to go back to
    assert not w.changed({**STABLE, "image": "app:2"}, running=False) and w.state == "Deploying"


def test_the_upgraded_spec_that_commits_becomes_the_stable_one() -> None:
    u = running(Clock())
    new = {**STABLE, "image": "app:2"}
    u.attempt_started(STABLE)
    u.changed(new, running=True)
    assert u.committed(STABLE) is None  # the old spec commits while it stops for the upgrade: nothing proven
    u.attempt_started(new)
    # the new spec is the stable one (what runs, without suspend and the like); a rollback's note cleared
    smaller = {k: v for k, v in new.items() if k != "workers"}
    assert u.committed({**smaller, "suspend": False}) == {
        "lifecycleState": "Running", "upgrade": {"result": "Upgraded", "failedSpec": None, "message": None}}
    assert u.stable == smaller
    assert u.committed(new) is None  # once


def test_an_upgrade_that_misses_its_deadline_rolls_back_to_the_stable_spec_until_the_spec_changes_again() -> None:
    clock = Clock()
    u = running(clock, healthDeadlineSeconds=60)
    broken = {**STABLE, "image": "app:missing", "upgrade": {"healthDeadlineSeconds": 60}}
    u.changed(broken, running=True)
    u.attempt_started(broken)
    clock.now += 59
    assert not u.unhealthy()
    clock.now += 1
    assert u.unhealthy()
    fields = u.roll_back(broken, "no step")
    assert fields == {"lifecycleState": "RolledBack",
                      "upgrade": {"result": "RolledBack", "failedSpec": spec_digest(broken), "message": "no step"}}
    body = {"metadata": {"generation": 3}, "spec": {**broken, "suspend": True}}
    assert u.spec_to_run(body)["spec"] == {**STABLE, "suspend": True, "upgrade": {"healthDeadlineSeconds": 60}}
    u.attempt_started(STABLE)
    assert u.committed(STABLE) is None and u.state == "RolledBack"  # the stable spec runs, still rolled back
    # an operator that restarts reads the same from the status
    again = Upgrades({"lifecycleState": "RolledBack", "lastStableSpec": STABLE, "upgrade": fields["upgrade"]}, clock)
    assert again.spec_to_run(body)["spec"]["image"] == "app:1"
    fixed = {**STABLE, "image": "app:3"}
    assert u.changed(fixed, running=True)
    assert u.spec_to_run({"metadata": {}, "spec": fixed})["spec"] == fixed


def test_without_a_stable_spec_or_with_rollback_off_the_failure_is_the_pipelines() -> None:
    clock = Clock()
    u = Upgrades({}, clock)
    u.changed(STABLE, running=True)
    assert u.roll_back(STABLE, "x") is None
    v = running(clock, rollback=False)
    new = {**STABLE, "image": "app:2", "upgrade": {"rollback": False}}
    v.changed(new, running=True)
    assert v.roll_back(new, "x") is None


@pytest.mark.parametrize("stable", [True, False])
def test_a_runner_whose_upgraded_spec_cannot_run_rolls_back_or_fails(stable: bool) -> None:
    r, api, events = runner(lambda body: None)
    status = {"lifecycleState": "Running", "lastStableSpec": pipeline()["spec"]} if stable else {}
    r.update_body({**pipeline(), "status": status})
    r._in_attempt = True  # an attempt runs
    broken = pipeline(image="app:missing")
    broken["metadata"]["generation"] = 2
    r.update_body(broken)
    assert r.upgrades.state == ("Upgrading" if stable else "Deploying")
    r._in_attempt = False
    ran: list[Any] = []

    def run_once(stopped: Any, reporter: Any) -> str:
        ran.append(r.run_body["spec"].get("image"))
        raise Unrunnable("the API server rejects the worker pod: image app:missing")

    r._run_once = run_once  # type: ignore[method-assign]
    rest = r.attempt(stopped=False)  # type: ignore[arg-type]
    states = [p["lifecycleState"] for p in api.patches if "lifecycleState" in p]
    if not stable:
        assert rest == Rest.CHANGE and states[-1] == "Failed"
        return
    assert rest == Rest.NONE and states[-1] == "RolledBack"
    assert [e[1] for e in events] == ["RolledBack"]
    r.attempt(stopped=False)  # type: ignore[arg-type]
    assert ran == ["app:missing", None]  # the second attempt runs the stable spec (no image field)


def test_the_runner_uses_the_checkpoint_then_stops() -> None:
    """What the coordinator's turn sees: no stop before the checkpoint it asked for is committed."""
    r, api, _ = runner(lambda body: None)
    r.update_body({**pipeline(), "status": {"lifecycleState": "Running", "lastStableSpec": pipeline()["spec"]}})
    r._in_attempt = True
    changed = pipeline(image="app:2")
    changed["metadata"]["generation"] = 2
    r.update_body(changed)

    class Ckpt:
        requested = False
        last_committed_at: float | None = None
        pointer = object()

    class Spec:
        checkpoint_steps, checkpoint_ms = 3, 0

    class Coordinator:
        committed = 4
        ckpt = Ckpt()
        spec = Spec()

    c = Coordinator()
    reporter = r._reporter()
    assert r._upgrade_step(c, reporter) is None  # type: ignore[arg-type]
    assert c.ckpt.requested
    assert r._upgrade_step(c, reporter) is None  # type: ignore[arg-type]
    c.ckpt.last_committed_at = 1e12
    assert r._upgrade_step(c, reporter) == "upgrade"  # type: ignore[arg-type]
    assert isinstance(r, PipelineRunner)


def test_a_spec_changed_while_no_operator_watched_is_on_trial_and_a_reverted_one_is_not() -> None:
    status = {"lifecycleState": "Running", "lastStableSpec": STABLE}
    assert Upgrades(status, Clock(), {**STABLE, "image": "app:2"}).state == "Upgrading"
    assert Upgrades(status, Clock(), {**STABLE, "suspend": True}).state == "Running"
    # the note of a rollback that a later upgrade superseded is not read as a rollback
    past = {**status, "upgrade": {"result": "Upgraded", "failedSpec": None}}
    assert Upgrades(past, Clock()).rolled_back is None


def test_with_nothing_to_go_back_to_the_deadline_never_stops_the_new_spec() -> None:
    clock = Clock()
    u = Upgrades({}, clock)
    u.changed(STABLE, running=False)
    u.attempt_started(STABLE)
    clock.now += 10_000
    assert not u.unhealthy()
    v = running(clock)
    stateless = {**STABLE, "image": "app:2", "upgrade": {"mode": "stateless"}}
    v.changed(stateless, running=True)
    v.attempt_started(stateless)
    clock.now += 10_000
    assert not v.unhealthy() and v.roll_back(stateless, "x") is None  # its state is gone: no rollback
