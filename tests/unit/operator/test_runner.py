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
