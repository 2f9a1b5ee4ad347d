"""The chart's NetworkPolicies, enforced by the cluster (kube-router on the local cluster): a pod that is
neither the pipeline's worker nor the operator cannot open a connection to a worker's Flight port, to Redis
or to ZooKeeper, while the pipeline itself (workers to each other, the operator to them, both to Redis and
ZooKeeper) goes on committing steps.

The probe is a pod of the project image that tries each address and prints what happened; the worker's
metrics port, open to anyone, is its control: a probe that reaches nothing proves nothing.
"""

from __future__ import annotations

import json
import time
from typing import Any

from kubernetes import client

from .conftest import IMAGE
from .test_operator import GROUP, PLURAL, VERSION, new_namespace, start, status, wait_for
from .test_operator import operator  # noqa: F401  (the fixture: the chart in the test's namespace)

PROBE = """
import json, socket, sys
out = {}
for name, host, port in json.loads(sys.argv[1]):
    try:
        socket.create_connection((host, port), timeout=5).close()
        out[name] = "connected"
    except OSError as exc:
        out[name] = type(exc).__name__
print(json.dumps(out), flush=True)
"""


def _probe(core: client.CoreV1Api, namespace: str, targets: list[tuple[str, str, int]]) -> dict[str, str]:
    name = f"probe-{int(time.time() * 1000) % 100000}"
    hardened = {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}}
    pod: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"restartPolicy": "Never", "automountServiceAccountToken": False,
                 "securityContext": {"runAsNonRoot": True, "runAsUser": 10001, "seccompProfile": {"type": "RuntimeDefault"}},
                 "containers": [{"name": "probe", "image": IMAGE, "imagePullPolicy": "Never",
                                 "command": ["python", "-c", PROBE, json.dumps(targets)],
                                 "securityContext": hardened}]},
    }
    core.create_namespaced_pod(namespace, pod)
    wait_for(f"probe pod {namespace}/{name} to finish", lambda: core.read_namespaced_pod(
        name, namespace).status.phase in ("Succeeded", "Failed"), 180)
    log = core.read_namespaced_pod_log(name, namespace)
    core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
    return dict(json.loads(log.strip().splitlines()[-1]))


def test_only_the_pipeline_and_the_operator_reach_workers_redis_and_zookeeper(
        kube: client.ApiClient, namespace: str, operator: str) -> None:
    api = client.CustomObjectsApi(kube)
    core = client.CoreV1Api(kube)
    name, _, _ = start(api, namespace, "net", 2000, until=2)
    policies = client.NetworkingV1Api(kube).list_namespaced_network_policy(namespace).items
    assert {f"{name}-workers", "ftp-ftpipeline-redis", "ftp-ftpipeline-zookeeper"} <= {p.metadata.name for p in policies}
    worker = core.read_namespaced_pod(f"{name}-w0", namespace)
    servers = {c: core.list_namespaced_pod(namespace, label_selector=f"app.kubernetes.io/component={c}").items[0]
               for c in ("redis", "zookeeper")}
    targets = [("worker flight", worker.status.pod_ip, 7000), ("worker metrics", worker.status.pod_ip, 9108),
               ("redis", servers["redis"].status.pod_ip, 6379), ("zookeeper", servers["zookeeper"].status.pod_ip, 2181)]
    outsider = new_namespace(kube, "outsider")
    try:
        for where in (outsider, namespace):  # another namespace, and the pipeline's own without its labels
            seen = _probe(core, where, targets)
            print(f"from {where}: {seen}")
            assert seen["worker metrics"] == "connected", seen  # the probe reaches what is open to it
            for refused in ("worker flight", "redis", "zookeeper"):
                assert seen[refused] != "connected", (where, refused, seen)
    finally:
        core.delete_namespace(outsider, grace_period_seconds=0)
    before = status(api, namespace, name).get("committedStep") or 0
    wait_for("the pipeline to go on committing", lambda: (status(api, namespace, name).get("committedStep") or 0)
             >= before + 2, 180)
    api.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
    wait_for("the pipeline's deletion", lambda: not api.list_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL)["items"], 120)

