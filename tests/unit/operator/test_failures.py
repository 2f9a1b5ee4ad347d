"""Classifying a lost worker pod from its status, on hand-written pods."""

from __future__ import annotations

from typing import Any

import pytest

from ftpipeline_operator.failures import Failure, failed, gone, image_pull_error


def pod(*containers: dict[str, Any], phase: str = "Running", deleting: bool = False, **status: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "p-w0"}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-22T10:00:00Z"
    return {"metadata": meta, "status": {"phase": phase, "containerStatuses": list(containers), **status}}


def running(name: str) -> dict[str, Any]:
    return {"name": name, "state": {"running": {"startedAt": "2026-11-22T09:00:00Z"}}}


def terminated(name: str, code: int, reason: str = "Error", message: str = "") -> dict[str, Any]:
    term: dict[str, Any] = {"exitCode": code, "reason": reason}
    if message:
        term["message"] = message
    return {"name": name, "state": {"terminated": term}}


def waiting(name: str, reason: str) -> dict[str, Any]:
    return {"name": name, "state": {"waiting": {"reason": reason, "message": f"{reason} for x"}}}


def test_a_healthy_or_starting_pod_has_not_failed() -> None:
    assert failed(pod(running("spark"), running("sidecar"))) is None
    assert failed(pod(waiting("spark", "ContainerCreating"), phase="Pending")) is None


def test_oom_killed_names_the_container() -> None:
    d = failed(pod(terminated("spark", 137, "OOMKilled"), running("sidecar"), phase="Failed"))
    assert d is not None and d.failure is Failure.OOM_KILLED and d.container == "spark"


def test_an_exit_is_an_application_error_even_with_code_zero() -> None:
    d = failed(pod(terminated("spark", 1, message="Py4JJavaError: boom"), running("sidecar")))
    assert d is not None and d.failure is Failure.APPLICATION_ERROR and "boom" in d.message
    d = failed(pod(terminated("spark", 0, "Completed"), running("sidecar"), phase="Succeeded"))
    assert d is not None and d.failure is Failure.APPLICATION_ERROR, "a worker never completes on its own"


def test_image_pull_errors() -> None:
    p = pod(waiting("spark", "ImagePullBackOff"), waiting("sidecar", "ErrImagePull"), phase="Pending")
    d = failed(p)
    assert d is not None and d.failure is Failure.IMAGE_PULL and d.container == "spark"
    assert image_pull_error(p) == d


@pytest.mark.parametrize(("reason", "expected"), [
    ("PreemptionByScheduler", Failure.PREEMPTED),
    ("EvictionByEvictionAPI", Failure.EVICTED),
    ("DeletionByTaintManager", Failure.EVICTED),
])
def test_disruption_conditions(reason: str, expected: Failure) -> None:
    p = pod(running("spark"), conditions=[{"type": "DisruptionTarget", "status": "True", "reason": reason}])
    d = failed(p)
    assert d is not None and d.failure is expected


def test_kubelet_eviction() -> None:
    d = failed(pod(phase="Failed", reason="Evicted", message="The node was low on resource: memory."))
    assert d is not None and d.failure is Failure.EVICTED and "memory" in d.message


def test_exits_caused_by_a_deletion_are_not_application_errors() -> None:
    p = pod(terminated("spark", 143), terminated("sidecar", 143), deleting=True)
    assert gone(p).failure is Failure.DELETED
    assert gone(pod(running("spark"))).failure is Failure.DELETED
    # but memory exhaustion before the deletion still explains it
    assert gone(pod(terminated("spark", 137, "OOMKilled"), deleting=True)).failure is Failure.OOM_KILLED


def test_str_is_readable() -> None:
    d = failed(pod(terminated("spark", 137, "OOMKilled")))
    assert str(d) == "OOMKilled in container spark: exit code 137"


def test_a_worker_that_cannot_run_is_told_apart_and_its_reason_quoted() -> None:
    """Exit code 78 (worker/exits.py): the termination message is the reason, in one line; the backend says
    so through cannot_run, and any other exit stays a loss to recover."""
    from ftpipeline.lineage.naming import WorkerId
    from ftpipeline_operator.cluster import KubernetesCluster

    reason = "invalid pipeline: spec.stages[1].transform.function: 'x.py' has no function 'nosuch'"
    d = failed(pod(terminated("spark", 78, message=reason + "\n"), running("sidecar")))
    assert d is not None and d.failure is Failure.CANNOT_RUN and d.message == reason and d.container == "spark"
    body = {"metadata": {"namespace": "ns", "name": "p"}, "spec": {}}
    cluster = KubernetesCluster(None, body, "r1", {}, running=[WorkerId("w0"), WorkerId("w1")])  # type: ignore[arg-type]
    cluster._delete = lambda worker, grace_s: None  # type: ignore[method-assign]
    labelled = {"labels": {"ftpipeline.io/run": "r1", "ftpipeline.io/worker": "w0"}}
    cluster.on_pod_event("MODIFIED", {**pod(terminated("spark", 78, message=reason), running("sidecar")),
                                      "metadata": labelled})
    labelled = {"labels": {"ftpipeline.io/run": "r1", "ftpipeline.io/worker": "w1"}}
    cluster.on_pod_event("MODIFIED", {**pod(terminated("spark", 1, message="boom"), running("sidecar")),
                                      "metadata": labelled})
    assert cluster.lost() == ["w0", "w1"]
    assert cluster.cannot_run(WorkerId("w0")) == reason and cluster.cannot_run(WorkerId("w1")) is None


def test_an_eviction_through_the_api_is_a_handover_until_a_container_ends() -> None:
    from ftpipeline_operator.failures import leaving

    cond = {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}
    running = [{"name": "sidecar", "state": {"running": {}}}]
    assert leaving({"status": {"conditions": [cond], "containerStatuses": running}})
    assert not leaving({"status": {"conditions": [{**cond, "reason": "PreemptionByScheduler"}],
                                   "containerStatuses": running}})
    assert not leaving({"status": {"conditions": [cond], "containerStatuses": [
        {"name": "sidecar", "state": {"terminated": {"exitCode": 0}}}]}})
    assert not leaving({"status": {"phase": "Running"}})
