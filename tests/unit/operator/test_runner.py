"""An attempt writes the pipeline's objects before anything else, and a refused write is a failed attempt."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubernetes.client.exceptions import ApiException

from ftpipeline_operator.resolve import Defaults
from ftpipeline_operator.runner import PipelineRunner, Rest


class StatusApi:
    """The status subresource of the custom objects API: what was patched, in order."""

    def __init__(self) -> None:
        self.patches: list[dict[str, Any]] = []

    def patch_namespaced_custom_object_status(self, group: str, version: str, namespace: str, plural: str,
                                              name: str, body: dict[str, Any]) -> None:
        self.patches.append(body["status"])


def pipeline(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"namespace": "ns", "name": "p", "generation": 1},
            "spec": {"workers": 2, "stages": [], **spec}}


def runner(publish: Any) -> tuple[PipelineRunner, StatusApi, list[tuple[str, str, str]]]:
    api, events = StatusApi(), []
    r = PipelineRunner(("ns", "p"), None, api, Defaults(), None,  # type: ignore[arg-type]
                       lambda *e: events.append(e), publish=publish)
    return r, api, events


def test_a_suspended_pipeline_gets_its_objects_then_its_phase() -> None:
    order: list[str] = []
    r, api, _ = runner(lambda body: order.append(f"published generation {body['metadata']['generation']}"))
    r.update_body(pipeline(suspend=True))
    assert order == []  # the handler's part: the body is recorded, nothing is written
    rest = r.attempt(stopped=False)  # type: ignore[arg-type]
    assert rest == Rest.CHANGE
    assert order == ["published generation 1"]
    assert [p.get("phase") for p in api.patches if "phase" in p] == ["Suspended"]


def test_a_refused_write_is_a_failed_attempt_that_is_retried_and_says_why() -> None:
    def refuse(body: Mapping[str, Any]) -> None:
        raise ApiException(status=500, reason="etcdserver: request timed out")

    r, api, events = runner(refuse)
    r.update_body(pipeline(suspend=True))
    rest = r.attempt(stopped=False)  # type: ignore[arg-type]
    assert rest.retry_in is not None and rest.retry_in > 0
    [last] = [p for p in api.patches if "phase" in p]
    assert last["phase"] == "Retrying" and "etcdserver: request timed out" in last["message"]
    assert [e[1] for e in events] == ["RunFailed"]


def test_a_running_attempt_takes_in_a_checkpoint_nonce_but_not_an_upgrade() -> None:
    """A change the run takes in without stopping is observed by it (``should_stop`` reports it); a change it
    stops for is observed by the attempt that runs it."""
    r, _, _ = runner(lambda body: None)
    r.update_body(pipeline())
    r._in_attempt = True
    r.update_body({**pipeline(checkpointNonce="a"), "metadata": {"namespace": "ns", "name": "p", "generation": 2}})
    assert r._absorbed == 2 and r._checkpoint_now.is_set()
    r.update_body({**pipeline(checkpointNonce="a", workers=3),
                   "metadata": {"namespace": "ns", "name": "p", "generation": 3}})
    assert r._absorbed == 2 and r._upgrade_stop


def test_a_change_the_running_attempt_does_not_apply_is_not_observed_by_it() -> None:
    """progressDeadlineSeconds is no upgrade, but the running attempt keeps the deadline it started with."""
    r, _, _ = runner(lambda body: None)
    r.update_body(pipeline())
    r._in_attempt = True
    r.update_body({**pipeline(progressDeadlineSeconds=60), "metadata": {"namespace": "ns", "name": "p", "generation": 2}})
    assert r._absorbed is None


def ended(phase: str, observed: int, generation: int = 1, **spec: Any) -> dict[str, Any]:
    doc = pipeline(**spec)
    doc["metadata"]["generation"] = generation
    doc["status"] = {"phase": phase, "observedGeneration": observed, "committedStep": 24, "attempt": 3}
    return doc


def test_a_pipeline_that_ended_under_an_earlier_operator_stays_as_it_ended() -> None:
    """An operator restart, upgrade or handover runs no finished pipeline again: no publish, no status, no
    attempt, and a checkpoint asked for is refused (resting)."""
    for phase in ("Succeeded", "Failed"):
        order: list[str] = []
        r, api, events = runner(lambda body: order.append("published"))
        r.update_body(ended(phase, observed=1))
        assert r.resting
        assert r.attempt(stopped=False) == Rest.CHANGE  # type: ignore[arg-type]
        assert (order, api.patches, events) == ([], [], []), phase


def test_a_finished_pipeline_whose_spec_changed_runs_again() -> None:
    """Changed while no operator watched (the status is of an older generation), or changed after: it runs."""
    r, api, _ = runner(lambda body: None)
    r.update_body(ended("Succeeded", observed=1, generation=2, suspend=True))
    assert not r.resting
    r.attempt(stopped=False)  # type: ignore[arg-type]
    assert [p["phase"] for p in api.patches if "phase" in p] == ["Suspended"]

    r, api, _ = runner(lambda body: None)
    r.update_body(ended("Failed", observed=1))
    r.update_body({**ended("Failed", observed=1, generation=2, suspend=True)})
    r.attempt(stopped=False)  # type: ignore[arg-type]
    assert [p["phase"] for p in api.patches if "phase" in p] == ["Suspended"]


def test_a_run_in_progress_or_retrying_is_resumed_by_a_new_operator() -> None:
    for phase in ("Running", "Retrying", "Recovering", "Starting"):
        r, _, _ = runner(lambda body: None)
        r.update_body(ended(phase, observed=1))
        assert not r.resting and r._ended is None, phase


def test_an_attempt_moves_the_phase_off_an_ended_one_before_anything_else() -> None:
    """An operator that dies while a changed Failed pipeline starts must not find it Failed with the new
    generation observed (it would never run again)."""
    r, api, _ = runner(lambda body: None)
    r.update_body(ended("Failed", observed=1))
    r.update_body(ended("Failed", observed=1, generation=2, workers=3))
    r.attempt(stopped=False)  # type: ignore[arg-type]  (no API here: the run fails after its first status)
    first = next(p for p in api.patches if "phase" in p)
    assert first["phase"] == "Starting" and first["observedGeneration"] == 2


def test_only_a_step_past_the_newest_one_is_progress_for_the_restart_budget() -> None:
    """Steps replayed after a resume commit again, and must not reset the failed attempts in a row."""
    from ftpipeline_operator.attempts import Attempts
    from ftpipeline.coordinator.restarts import RestartPolicy

    r, _, _ = runner(lambda body: None)
    r.update_body({**ended("Retrying", observed=1)})  # committedStep 24
    r.run_body = r.body
    r.attempts = Attempts(RestartPolicy(max_restarts=5), lambda: 0.0)
    r.attempts.failed("x")
    reporter = r._reporter()

    class Coordinator:
        committed = 20
        spec = None

    reporter.commits, reporter.committed_step = 3, 20  # replayed up to the newest step before the failure
    r._upgrade_step(Coordinator(), reporter)  # type: ignore[arg-type]
    assert r.attempts._since_progress == 1
    reporter.committed_step = 25
    r._upgrade_step(Coordinator(), reporter)  # type: ignore[arg-type]
    assert r.attempts._since_progress == 0


def test_an_older_operators_whole_stable_spec_moves_to_its_config_map_at_the_first_commit() -> None:
    from tests.unit.operator.test_stable import ConfigMaps

    core = ConfigMaps()
    api, events = StatusApi(), []
    r = PipelineRunner(("ns", "p"), core, api, Defaults(), None, lambda *e: events.append(e))  # type: ignore[arg-type]
    doc = pipeline()
    doc["metadata"]["uid"] = "u1"
    doc["status"] = {"phase": "Running", "lifecycleState": "Running", "lastStableSpec": doc["spec"]}
    r.update_body(doc)
    r.run_body = doc
    reporter = r._reporter()
    reporter.commits, reporter.committed_step = 1, 1

    class Coordinator:
        committed = 1

    r._upgrade_step(Coordinator(), reporter)  # type: ignore[arg-type]
    assert ("ns", "p-stable-spec") in core.maps
    [patch] = [p for p in api.patches if "stableSpec" in p]
    assert patch["lastStableSpec"] is None and patch["stableSpec"]["configMap"] == "p-stable-spec"
