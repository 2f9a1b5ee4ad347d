"""KubernetesCluster turns pod events into lost workers: once each, only for its own run.

The API calls go to a recording stand-in: the point here is the event logic
(the real API server is exercised by the e2e tier).
"""

from __future__ import annotations

from typing import Any, cast

from kubernetes import client

from ftpipeline.lineage.naming import WorkerId
from ftpipeline_operator import render
from ftpipeline_operator.cluster import KubernetesCluster
from ftpipeline_operator.failures import Failure

BODY = {"apiVersion": "ftpipeline.io/v1alpha1", "kind": "FTPipeline",
        "metadata": {"name": "clicks", "namespace": "data", "uid": "u1"},
        "spec": {"image": "img", "entryPoint": "/m.py", "workers": 2, "stages": []}}


class Calls:
    def __init__(self) -> None:
        self.created: list[dict[str, Any]] = []
        self.deleted: list[tuple[str, int]] = []

    def create_namespaced_pod(self, namespace: str, pod: dict[str, Any]) -> None:
        self.created.append(pod)

    def delete_namespaced_pod(self, name: str, namespace: str, grace_period_seconds: int) -> None:
        self.deleted.append((name, grace_period_seconds))


def cluster() -> tuple[KubernetesCluster, Calls]:
    calls = Calls()
    return KubernetesCluster(cast(client.CoreV1Api, calls), BODY, "run-1", {}), calls


def pod_of(worker: str, run: str = "run-1", **status: Any) -> dict[str, Any]:
    return {"metadata": {"name": f"clicks-{worker}", "labels": {render.WORKER_LABEL: worker, render.RUN_LABEL: run}},
            "status": {"phase": "Running", **status}}


def test_a_deleted_pod_is_one_lost_worker() -> None:
    c, calls = cluster()
    c.start_worker(WorkerId("w0"))
    assert calls.created[0]["metadata"]["name"] == "clicks-w0"
    c.on_pod_event("MODIFIED", pod_of("w0"))
    assert c.lost() == []
    c.on_pod_event("DELETED", pod_of("w0"))
    c.on_pod_event("DELETED", pod_of("w0"))  # a repeated event is not a second loss
    assert c.lost() == ["w0"]
    assert c.lost() == []
    assert c.diagnoses[WorkerId("w0")].failure is Failure.DELETED


def test_a_worker_whose_heartbeat_expired_keeps_that_reason_and_is_not_lost_twice() -> None:
    c, calls = cluster()
    c.start_worker(WorkerId("w1"))
    c.declare_lost(WorkerId("w1"), "reported by w0.ab: heartbeat expired")
    c.kill_worker(WorkerId("w1"))
    c.on_pod_event("DELETED", pod_of("w1"))  # the deletion that followed is not a second loss
    assert c.lost() == []
    assert c.diagnoses[WorkerId("w1")].failure is Failure.HEARTBEAT_EXPIRED
    assert calls.deleted == [("clicks-w1", 0)]


def test_a_failed_pod_is_lost_and_deleted() -> None:
    c, calls = cluster()
    c.start_worker(WorkerId("w1"))
    oom = {"containerStatuses": [{"name": "spark", "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}]}
    c.on_pod_event("MODIFIED", pod_of("w1", **oom))
    assert c.lost() == ["w1"]
    assert c.diagnoses[WorkerId("w1")].failure is Failure.OOM_KILLED
    assert calls.deleted == [("clicks-w1", 0)]


def test_pods_of_another_run_or_never_started_are_ignored() -> None:
    c, _ = cluster()
    c.start_worker(WorkerId("w0"))
    c.on_pod_event("DELETED", pod_of("w0", run="run-0"))   # the previous operator's pod
    c.on_pod_event("DELETED", pod_of("w7"))                # not one of ours
    assert c.lost() == []


def test_stop_deletes_gracefully_and_reports_nothing() -> None:
    c, calls = cluster()
    c.start_worker(WorkerId("w0"))
    c.stop()
    c.on_pod_event("DELETED", pod_of("w0"))
    assert c.lost() == []
    assert calls.deleted == [("clicks-w0", 10)]


def test_a_pod_evicted_through_the_api_is_not_lost_while_it_hands_over_but_is_once_it_dies() -> None:
    c, calls = cluster()
    c.start_worker(WorkerId("w0"))
    evicted = {"conditions": [{"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}],
               "containerStatuses": [{"name": "spark", "state": {"running": {}}}]}
    c.on_pod_event("MODIFIED", {**pod_of("w0", **evicted), "metadata": {
        **pod_of("w0")["metadata"], "deletionTimestamp": "2026-11-29T00:00:00Z"}})
    assert c.lost() == [] and calls.deleted == []  # the worker asks for its handover itself
    ended = {**evicted, "containerStatuses": [{"name": "spark", "state": {"terminated": {"exitCode": 137}}}]}
    c.on_pod_event("MODIFIED", pod_of("w0", **ended))  # it died before the handover: lost after all
    assert c.lost() == ["w0"] and c.diagnoses[WorkerId("w0")].failure is Failure.EVICTED
    c.start_worker(WorkerId("w1"))
    c.on_pod_event("DELETED", pod_of("w1", **evicted))  # gone, whatever it was doing
    assert c.lost() == ["w1"]


def test_replacements_prefer_other_nodes_than_the_one_whose_worker_went_silent_for_a_while() -> None:
    """A node lost looks alive to the scheduler for its grace period, and emptiest once its pods are deleted."""
    now = [100.0]
    calls = Calls()
    c = KubernetesCluster(cast(client.CoreV1Api, calls), BODY, "run-1", {}, clock=lambda: now[0])
    for w, node in (("w0", "node-a"), ("w1", "node-b")):
        c.start_worker(WorkerId(w))
        c.on_pod_event("MODIFIED", {**pod_of(w), "spec": {"nodeName": node}})
    c.on_pod_event("DELETED", {**pod_of("w0"), "spec": {"nodeName": "node-a"}})  # a pod deleted: no suspect
    c.declare_lost(WorkerId("w1"), "reported by w0.ab: heartbeat expired")
    c.start_worker(WorkerId("w2"))  # no worker runs anywhere else: only a preference
    away = {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["node-b"]}
    preferred = calls.created[-1]["spec"]["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert preferred == [{"weight": 100, "preference": {"matchExpressions": [away]}}]
    c.on_pod_event("MODIFIED", {**pod_of("w2"), "spec": {"nodeName": "node-c"}})  # w2 runs on node-c
    c.start_worker(WorkerId("w4"))  # now node-c proves the pipeline's pods fit elsewhere: a requirement
    required = calls.created[-1]["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert required == {"nodeSelectorTerms": [{"matchExpressions": [away]}]}
    # the pod is the same pod otherwise: its digest (what a resumed operator compares) does not change
    assert calls.created[-1]["metadata"]["annotations"][render.POD_DIGEST] == \
        render.worker_pod(BODY, "w4", "run-1", {})["metadata"]["annotations"][render.POD_DIGEST]
    now[0] += 601
    c.start_worker(WorkerId("w3"))
    assert "affinity" not in calls.created[-1]["spec"]


def test_a_replacements_preference_keeps_the_pipelines_own_affinity() -> None:
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["pipelines"]}]}]}}}
    body = {**BODY, "spec": {**BODY["spec"], "affinity": affinity}}
    pod = render.avoiding(render.worker_pod(body, "w2", "run-1", {}), ["node-b"])
    got = pod["spec"]["affinity"]["nodeAffinity"]
    assert got["requiredDuringSchedulingIgnoredDuringExecution"] == \
        affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert len(got["preferredDuringSchedulingIgnoredDuringExecution"]) == 1
    pod = render.avoiding(render.worker_pod(body, "w2", "run-1", {}), ["node-b"], required=True)
    [term] = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert term["matchExpressions"] == [{"key": "pool", "operator": "In", "values": ["pipelines"]},
                                        {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["node-b"]}]
    assert affinity["nodeAffinity"] == {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["pipelines"]}]}]}}  # not changed in place
