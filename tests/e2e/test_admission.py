"""Admission on a real API server: the operator's validating webhook refuses what the CRD cannot judge.

The chart is installed with its default policy (no hostPath, no service
account but the one listed); each refused FTPipeline names its field in the
API server's answer, and nothing is stored.
"""

from __future__ import annotations

import copy
import json
import subprocess
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from .conftest import IMAGE, example_pipeline
from .test_operator import GROUP, PLURAL, VERSION, chart, wait_for

pytestmark = pytest.mark.skipif(subprocess.run(["which", "helm"], capture_output=True).returncode != 0,
                                reason="no helm on PATH")

Change = Callable[[dict[str, Any]], None]


def _cycle(doc: dict[str, Any]) -> None:
    stages = doc["spec"]["stages"]
    stages[1]["inputs"] = [{"stage": stages[2]["name"]}]  # a transform fed by its own consumer


REFUSED: list[tuple[str, Change, str, str]] = [
    ("hostPath", lambda d: d["spec"].update(volumes=[{"name": "node", "hostPath": {"path": "/"}}]),
     "spec.volumes[0].hostPath", "volume type hostPath is not allowed"),
    ("secret volume", lambda d: d["spec"].update(volumes=[{"name": "s", "secret": {"secretName": "db"}}]),
     "spec.volumes[0].secret", "not allowed"),
    ("foreign service account", lambda d: d["spec"].update(serviceAccountName="default"),
     "spec.serviceAccountName", "'default' is not allowed"),
    ("cycle", _cycle, "spec.stages[", "cycle"),
    ("unknown volume type", lambda d: d["spec"].update(volumes=[{"name": "node", "hostpath": {"path": "/"}}]),
     "spec.volumes[0].hostpath", "unknown volume type 'hostpath' (did you mean hostPath?)"),
    # cross-field rules: the webhook evaluates them (the CRD carries none), naming the stage
    ("duplicate stage", lambda d: d["spec"]["stages"][3].update(name="clean"),
     "spec.stages[3].name", "duplicate stage name 'clean' (also spec.stages[1])"),
    ("unknown input", lambda d: d["spec"]["stages"][1]["inputs"][0].update(stage="nope"),
     "spec.stages[1].inputs[0].stage", "unknown stage 'nope'"),
    ("backoff", lambda d: d["spec"].setdefault("recovery", {}).update(backoff={"initialMs": 5000, "maxMs": 10}),
     "spec.recovery.backoff", "maxMs must be at least initialMs"),
    ("two stage kinds", lambda d: d["spec"]["stages"][1].update(sink={"parquet": {"path": "x"}}),
     "spec.stages[1]", "needs exactly one of source, transform"),
]


@pytest.fixture
def operator_with_default_policy(kube: client.ApiClient, namespace: str, crd: str) -> Iterator[str]:
    with chart(namespace, "--set", "policy.volumeTypes={configMap,emptyDir,persistentVolumeClaim}",
               "--set", "policy.serviceAccounts={pipelines}") as release:
        yield release


def _doc(namespace: str, change: Change) -> dict[str, Any]:
    doc = copy.deepcopy(example_pipeline())
    doc["metadata"] = {"name": "adm", "namespace": namespace}
    doc["spec"]["image"] = IMAGE
    doc["spec"].pop("volumes", None)
    doc["spec"].pop("volumeMounts", None)
    change(doc)
    return doc


def test_the_webhook_refuses_what_the_policy_and_the_dataflow_forbid_naming_the_field(
        kube: client.ApiClient, namespace: str, operator_with_default_policy: str) -> None:
    api = client.CustomObjectsApi(kube)
    for what, change, field, words in REFUSED:
        with pytest.raises(ApiException) as err:
            api.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, _doc(namespace, change))
        message = json.loads(err.value.body)["message"]
        print(f"{what}: {message}")
        assert err.value.status in (400, 403, 422), err.value.body
        assert field in message and words in message, message
        assert "some validation rules were not checked" not in message, message
    # nothing was stored
    assert api.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)["items"] == []

    # the listed account and an allowed volume pass (a server-side dry run: the webhook answers, nothing runs)
    allowed = _doc(namespace, lambda d: d["spec"].update(serviceAccountName="pipelines",
                                                         volumes=[{"name": "scratch", "emptyDir": {}}]))
    api.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, allowed, dry_run="All")

    # an update is judged too: a stored pipeline cannot be changed into a forbidden one
    stored = api.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL,
                                                 _doc(namespace, lambda d: d["spec"].update(suspend=True)))
    with pytest.raises(ApiException) as err:
        api.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "adm",
                                           {"spec": {"volumes": [{"name": "node", "hostPath": {"path": "/"}}]}})
    assert "spec.volumes[0].hostPath" in json.loads(err.value.body)["message"]
    now = api.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "adm")
    assert "volumes" not in now["spec"] and now["metadata"]["generation"] == stored["metadata"]["generation"]

    # with the operator down, a spec change is refused (fail closed) but metadata is not held hostage
    apps = client.AppsV1Api(kube)
    [deployment] = apps.list_namespaced_deployment(namespace, label_selector="app.kubernetes.io/component=operator").items
    apps.patch_namespaced_deployment_scale(deployment.metadata.name, namespace, {"spec": {"replicas": 0}})
    core = client.CoreV1Api(kube)
    wait_for("the operator pod to go", lambda: not core.list_namespaced_pod(
        namespace, label_selector="app.kubernetes.io/component=operator").items, 120)
    with pytest.raises(ApiException) as err:
        api.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "adm", {"spec": {"workers": 1}})
    assert "validate.ftpipelines.ftpipeline.io" in json.loads(err.value.body)["message"]
    api.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "adm",
                                       {"metadata": {"labels": {"team": "a"}}})
    apps.patch_namespaced_deployment_scale(deployment.metadata.name, namespace, {"spec": {"replicas": 1}})
    wait_for("the operator to be back", lambda: (apps.read_namespaced_deployment(
        deployment.metadata.name, namespace).status.ready_replicas or 0) == 1, 180)

    # the operator's own metadata updates (its finalizer) still pass, so the deletion completes
    api.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "adm")
    for _ in range(120):
        if not api.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)["items"]:
            break
        time.sleep(0.5)
    else:
        raise AssertionError("the stored pipeline was not deleted within 60 s")


def _may(kube: client.ApiClient, user: str, verb: str, resource: str, namespace: str) -> bool:
    review = client.AuthorizationV1Api(kube).create_subject_access_review(client.V1SubjectAccessReview(
        spec=client.V1SubjectAccessReviewSpec(user=user, resource_attributes=client.V1ResourceAttributes(
            verb=verb, resource=resource, namespace=namespace))))
    return bool(review.status.allowed)


def test_the_operator_reads_secrets_and_runs_pipelines_only_in_the_namespaces_it_watches(
        kube: client.ApiClient, namespace: str, operator_with_default_policy: str) -> None:
    from .test_operator import new_namespace, wait_for

    user = f"system:serviceaccount:{namespace}:{operator_with_default_policy}-ftpipeline"
    other = new_namespace(kube, "unwatched")
    try:
        assert _may(kube, user, "get", "secrets", namespace) and _may(kube, user, "create", "pods", namespace)
        for verb in ("get", "list", "create"):
            assert not _may(kube, user, verb, "secrets", other), verb
        assert not _may(kube, user, "create", "pods", other)
        # a pipeline there is not touched: no finalizer, no status, no pods
        api = client.CustomObjectsApi(kube)
        api.create_namespaced_custom_object(GROUP, VERSION, other, PLURAL, _doc(other, lambda d: None))
        mine = api.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL,
                                                   _doc(namespace, lambda d: d["spec"].update(suspend=True)))
        wait_for("the watched pipeline's finalizer", lambda: api.get_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, mine["metadata"]["name"])["metadata"].get("finalizers"), 60)
        theirs = api.get_namespaced_custom_object(GROUP, VERSION, other, PLURAL, "adm")
        assert not theirs["metadata"].get("finalizers") and "status" not in theirs, theirs
        assert client.CoreV1Api(kube).list_namespaced_pod(other).items == []
        api.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, mine["metadata"]["name"])
        wait_for("the watched pipeline's deletion", lambda: not api.list_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL)["items"], 60)
    finally:
        client.CoreV1Api(kube).delete_namespace(other, grace_period_seconds=0)
