"""Operator logic that needs no running pods, against the real API server.

The rendered objects are accepted by the API server's own validation; status
patches land on the status subresource and read back; the cluster backend's
pod calls and the deletion that reports a lost worker.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, cast

import pytest
from kubernetes import client

from ftpipeline.lineage.naming import WorkerId
from ftpipeline_operator import render
from ftpipeline_operator.cluster import KubernetesCluster
from ftpipeline_operator.owned import OwnedObjects, server_side_apply
from ftpipeline_operator.resolve import Defaults
from ftpipeline_operator.runner import PipelineRunner
from ftpipeline_operator.slots import CoordinatorSlots

from .conftest import IMAGE, example_pipeline

GROUP, VERSION, PLURAL = "ftpipeline.io", "v1alpha1", "ftpipelines"


def created(kube: client.ApiClient, namespace: str) -> dict[str, Any]:
    doc = example_pipeline()
    doc["metadata"] = {"name": "api", "namespace": namespace}
    doc["spec"]["image"] = IMAGE
    api = client.CustomObjectsApi(kube)
    return cast(dict[str, Any], api.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, doc))


def test_rendered_objects_are_accepted_by_the_api_server(kube: client.ApiClient, namespace: str, crd: str) -> None:
    body = created(kube, namespace)
    core = client.CoreV1Api(kube)
    # the reconcile handler's own writes (server-side apply): a first apply creates, a changed one updates
    owned = OwnedObjects(server_side_apply(core))
    assert owned.apply([render.config_map(body), render.service(body)]) == 2
    workers = int(body["spec"]["workers"]) + 1
    changed = {**body, "spec": {**body["spec"], "workers": workers}}
    assert owned.apply([render.config_map(changed), render.service(changed)]) == 1  # the Service is unchanged
    stored = core.read_namespaced_config_map(render.config_map_name("api"), namespace).data[render.PIPELINE_FILE]
    assert f"workers: {workers}" in stored
    bad = {**render.service(body), "spec": {**render.service(body)["spec"], "ports": [{"port": -1}]}}
    with pytest.raises(client.exceptions.ApiException) as refused:
        owned.apply([bad])
    assert refused.value.status == 422
    # server-side dry run: the pod passes the API server's full validation without being scheduled
    pod = core.create_namespaced_pod(namespace, cast(Any, render.worker_pod(body, "w0", "r1", {"redis": "redis://r"})),
                                     dry_run="All")
    assert pod.metadata.owner_references[0].kind == "FTPipeline"
    assert {c.name for c in pod.spec.containers} == {"spark", "sidecar"}


def test_status_patches_read_back_from_the_status_subresource(kube: client.ApiClient, namespace: str,
                                                             crd: str) -> None:
    body = created(kube, namespace)
    api = client.CustomObjectsApi(kube)
    events: list[tuple[str, str, str]] = []
    runner = PipelineRunner((namespace, "api"), client.CoreV1Api(kube), api, Defaults(), None,
                            lambda *e: events.append(e))
    runner.update_body(body)
    reporter = runner._reporter()
    reporter.on_workers_starting([WorkerId("w0"), WorkerId("w1")])
    reporter.on_step_committed(1, 100, 0.2)
    status = api.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "api")["status"]
    assert status["phase"] == "Running" and status["committedStep"] == 1
    assert status["observedGeneration"] == body["metadata"]["generation"]
    assert {c["type"]: c["status"] for c in status["conditions"]}["Ready"] == "True"


def test_a_deleted_worker_pod_is_reported_lost(kube: client.ApiClient, namespace: str, crd: str) -> None:
    body = created(kube, namespace)
    core = client.CoreV1Api(kube)
    cluster = KubernetesCluster(core, body, "r1", {"redis": "redis://r"})
    cluster.start_worker(WorkerId("w0"))
    pod = core.read_namespaced_pod("api-w0", namespace)
    cluster.kill_worker(WorkerId("w0"))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            core.read_namespaced_pod("api-w0", namespace)
            time.sleep(0.2)
        except client.exceptions.ApiException as exc:
            assert exc.status == 404
            break
    cluster.on_pod_event("DELETED", core.api_client.sanitize_for_serialization(pod))
    assert cluster.lost() == ["w0"]
    assert str(cluster.diagnoses[WorkerId("w0")]) == "Deleted"


class Stopped:
    """Kopf's stop flag of an async daemon."""

    def __init__(self) -> None:
        self.event = asyncio.Event()

    def __bool__(self) -> bool:
        return self.event.is_set()

    async def wait(self, timeout: float | None = None) -> "Stopped":
        await self.event.wait()
        return self


def serve_until(runner: PipelineRunner, done: Callable[[], bool], timeout_s: float = 180) -> None:
    """Run ``runner`` as the operator's daemon does (``slots.py``) until ``done()``, then stop it."""
    async def main() -> None:
        stopped = Stopped()
        daemon = asyncio.create_task(CoordinatorSlots(1).serve(runner, stopped))
        deadline = time.monotonic() + timeout_s
        while not await asyncio.to_thread(done):
            assert time.monotonic() < deadline, "timed out"
            assert not daemon.done(), daemon
            await asyncio.sleep(0.2)
        stopped.event.set()
        await asyncio.wait_for(daemon, 60)

    asyncio.run(main())


def _phase(api: client.CustomObjectsApi, namespace: str, name: str) -> str:
    obj: Any = api.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
    return str((obj.get("status") or {}).get("phase") or "")


def test_a_spec_only_the_runtime_can_judge_is_rejected_with_an_event(kube: client.ApiClient, namespace: str,
                                                                    crd: str) -> None:
    doc = example_pipeline()
    doc["metadata"] = {"name": "cycle", "namespace": namespace}
    doc["spec"]["image"] = IMAGE
    doc["spec"]["stages"][1]["inputs"] = [{"stage": "per-user"}]  # clean <- per-user <- clean: a cycle
    api = client.CustomObjectsApi(kube)
    body = api.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, doc)  # the CRD cannot see cycles
    events: list[tuple[str, str, str]] = []
    runner = PipelineRunner((namespace, "cycle"), client.CoreV1Api(kube), api, Defaults(), None,
                            lambda *e: events.append(e))
    runner.update_body(body)
    serve_until(runner, lambda: _phase(api, namespace, "cycle") == "Failed")
    status = api.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "cycle")["status"]
    assert status["phase"] == "Failed"
    assert "spec.stages[1].inputs: cycle" in status["message"]
    assert [(kind, reason) for kind, reason, _ in events] == [("Warning", "Rejected")]


def test_a_run_that_keeps_failing_is_retried_within_its_budget_then_failed(kube: client.ApiClient, namespace: str,
                                                                          crd: str) -> None:
    """A Secret that does not exist: each attempt fails in one line naming it; after maxRestarts retries
    the pipeline is Failed with the Failed condition, not Pending forever."""
    doc = example_pipeline()
    doc["metadata"] = {"name": "nosecret", "namespace": namespace}
    doc["spec"]["redis"] = {"secretRef": {"name": "nosuch", "key": "url"}}
    doc["spec"]["recovery"]["restartBudget"] = {"maxRestarts": 2}
    doc["spec"]["recovery"]["backoff"] = {"initialMs": 10, "maxMs": 20}
    api = client.CustomObjectsApi(kube)
    body = api.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, doc)
    events: list[tuple[str, str, str]] = []
    runner = PipelineRunner((namespace, "nosecret"), client.CoreV1Api(kube), api, Defaults(image=IMAGE), None,
                            lambda *e: events.append(e))
    runner.update_body(body)
    serve_until(runner, lambda: _phase(api, namespace, "nosecret") == "Failed")
    status = api.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "nosecret")["status"]
    assert status["phase"] == "Failed", status
    assert status["lastFailure"]["attempt"] == 3
    assert status["message"].startswith(f"attempt 3 failed: Secret {namespace}/nosuch not found (spec.redis.secretRef)")
    assert "restart budget spent" in status["message"] and "\n" not in status["message"]
    conditions = {c["type"]: c for c in status["conditions"]}
    assert (conditions["Failed"]["status"], conditions["Failed"]["reason"]) == ("True", "RestartBudgetExhausted")
    assert [reason for _, reason, _ in events] == ["RunFailed", "RunFailed", "RestartBudgetExhausted"]
    assert all(f"Secret {namespace}/nosuch not found" in message for _, _, message in events)
