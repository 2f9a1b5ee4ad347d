"""Two operator replicas: the active one's pod is deleted mid-run, the standby takes every pipeline over.

The chart runs with ``operator.replicas=2``; Kopf's peering makes the older
replica active (``ftpipeline_operator/peering.py``). The test finds it in the
peering object, deletes its pod while a pipeline runs, and checks that the
standby resumes the pipeline to the end with output equal to the oracle,
printing the handover time: from the delete to the next committed step. The
operator that goes leaves the worker pods running, and the standby takes
them over (``ftpipeline_operator/pods.py``): the same pods — no new pod, no
new JVM — roll back to the newest checkpoint under its coordinator, which
claimed the command log. Both replicas serve the admission webhook with one
certificate, so objects are admitted whichever answers.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from .test_operator import (GROUP, PLURAL, VERSION, chart, compare, events, finished, oracle_spec, spark,  # noqa: F401
                            start, status, wait_for)

SELECTOR = "app.kubernetes.io/component=operator"


@pytest.fixture
def two_operators(kube: client.ApiClient, namespace: str, crd: str) -> Iterator[str]:
    """Two replicas; after ``helm uninstall``, what the operator made for itself (the peering object, the
    webhook certificate's Secret) is gone with the release (``ftpipeline_operator/owners.py``)."""
    custom, core = client.CustomObjectsApi(kube), client.CoreV1Api(kube)
    with chart(namespace, "--set", "operator.replicas=2") as release:
        secret = core.read_namespaced_secret("ftp-ftpipeline-webhook-tls", namespace)
        peering = custom.get_cluster_custom_object("kopf.dev", "v1", "clusterkopfpeerings", f"{namespace}.ftp-ftpipeline")
        assert [o.kind for o in secret.metadata.owner_references or []] == ["Deployment"]
        assert [o["kind"] for o in peering["metadata"].get("ownerReferences", [])] == ["ClusterRole"]
        yield release
    wait_for("the peering object removed with the release",
             lambda: _gone(lambda: custom.get_cluster_custom_object("kopf.dev", "v1", "clusterkopfpeerings",
                                                                    f"{namespace}.ftp-ftpipeline")), 120)
    wait_for("the webhook Secret removed with the release",
             lambda: _gone(lambda: core.read_namespaced_secret("ftp-ftpipeline-webhook-tls", namespace)), 120)


def _gone(read: Any) -> bool:
    try:
        read()
    except client.exceptions.ApiException as exc:
        if exc.status == 404:
            return True
        raise
    return False


def _peers(kube: client.ApiClient, namespace: str) -> dict[str, Any]:
    custom = client.CustomObjectsApi(kube)
    peering = custom.get_cluster_custom_object("kopf.dev", "v1", "clusterkopfpeerings", f"{namespace}.ftp-ftpipeline")
    return dict(peering.get("status") or {})


def _active(kube: client.ApiClient, namespace: str) -> str:
    """The live operator pod of highest priority in the peering object, once both replicas are in it."""
    return str(wait_for("both operator replicas in the peering object", lambda: _highest(kube, namespace), 180))


def _highest(kube: client.ApiClient, namespace: str) -> str | None:
    pods = {p.metadata.name for p in client.CoreV1Api(kube).list_namespaced_pod(namespace, label_selector=SELECTOR).items
            if p.metadata.deletion_timestamp is None}
    peers = {name: info for name, info in _peers(kube, namespace).items() if name in pods}
    if len(peers) != 2:
        return None
    return max(peers, key=lambda name: int(peers[name]["priority"]))


def test_the_standby_operator_takes_over_a_running_pipeline_when_the_active_one_goes(
        kube: client.ApiClient, namespace: str, two_operators: str, spark: object) -> None:
    api = client.CustomObjectsApi(kube)
    core = client.CoreV1Api(kube)
    steps = 30
    name, doc, data = start(api, namespace, "ha", steps, until=4)
    active = _active(kube, namespace)
    [standby] = [p.metadata.name for p in core.list_namespaced_pod(namespace, label_selector=SELECTOR).items
                 if p.metadata.name != active]
    workers = f"ftpipeline.io/pipeline={name},app.kubernetes.io/component=worker"
    before = {p.metadata.name: p.metadata.uid for p in core.list_namespaced_pod(namespace, label_selector=workers).items}
    at_kill = status(api, namespace, name).get("committedStep") or 0
    t0 = time.monotonic()
    core.delete_namespaced_pod(active, namespace)
    # the operator that goes may commit a step or two as it stops: the standby's first is after its Event
    [taking_over] = wait_for("the standby to take the worker pods over",
                             lambda: events(core, namespace, name, "TakingOver"), 300)
    taken_at = status(api, namespace, name).get("committedStep") or 0
    wait_for("a step committed after the handover",
             lambda: (status(api, namespace, name).get("committedStep") or 0) > taken_at, 300)
    handover = time.monotonic() - t0
    after = {p.metadata.name: p.metadata.uid for p in core.list_namespaced_pod(namespace, label_selector=workers).items}
    final = finished(api, namespace, name)
    print(f"active operator {active} deleted at step {at_kill}; standby {standby}: {taking_over!r} at step "
          f"{taken_at}, committed again {handover:.1f} s after the delete, and finished: {final}")
    assert at_kill < steps and taken_at < steps, "the pipeline ended before the handover: nothing was tested"
    assert len(before) == 2 and after == before, (before, after)  # taken over: no pod replaced
    assert final["phase"] == "Succeeded", final
    assert final["committedStep"] == steps
    assert _active(kube, namespace) == standby  # the replica the Deployment added stands by behind it
    [result] = compare(spark, oracle_spec(doc, data), steps)
    assert result.duplicates == 0, result
    assert result.equal, result
    api.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
