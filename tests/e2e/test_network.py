"""The chart's NetworkPolicies, enforced by the cluster (kube-router on the local cluster): a pod that is
neither the pipeline's worker nor the operator cannot open a connection to a worker's Flight port, to Redis
or to ZooKeeper, while the pipeline itself (workers to each other, the operator to them, both to Redis and
ZooKeeper) goes on committing steps.

The probe is a pod of the project image that tries each address and prints what happened; the worker's
metrics port, open to anyone, is its control: a probe that reaches nothing proves nothing.

Past the network, the stores still speak TLS alone: a pod that wears a worker's labels (whoever may create
pods in a watched namespace can) gets no plaintext answer from Redis or ZooKeeper, cannot take an
impostor for them, and with their CA reaches a server that still asks for its password.
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


TLS_PROBE = """
import json, socket, ssl, sys, time
out = {}
def plaintext(host, port, request):
    try:
        with socket.create_connection((host, port), timeout=5) as s:
            s.sendall(request)
            s.settimeout(5)
            return repr(s.recv(200))
    except OSError as exc:
        return type(exc).__name__
def tls(host, port, cafile, request):
    context = ssl.create_default_context(cafile=cafile)
    try:
        with socket.create_connection((host, port), timeout=5) as raw:
            with context.wrap_socket(raw, server_hostname=host) as s:
                if not request:
                    return "tls:handshake"
                s.sendall(request)
                return "tls:" + repr(s.recv(200))
    except ssl.SSLCertVerificationError:
        return "untrusted"
    except OSError as exc:
        return type(exc).__name__
redis_host, zk_host = sys.argv[1], sys.argv[2]
deadline = time.monotonic() + 60  # the policy controller lets this new pod in once it has seen its address
for host, port in ((redis_host, 6379), (zk_host, 2181)):
    while True:
        try:
            socket.create_connection((host, port), timeout=5).close()
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(1)
out["redis plaintext"] = plaintext(redis_host, 6379, b"PING\\r\\n")
out["zookeeper plaintext"] = plaintext(zk_host, 2181, b"srvr")
out["redis, system CAs"] = tls(redis_host, 6379, None, b"PING\\r\\n")
out["zookeeper, system CAs"] = tls(zk_host, 2181, None, b"srvr")
out["redis, its CA"] = tls(redis_host, 6379, "/ca/redis/ca.crt", b"PING\\r\\n")
out["zookeeper, its CA"] = tls(zk_host, 2181, "/ca/zookeeper/ca.crt", b"")
print(json.dumps(out), flush=True)
"""


def _probe(core: client.CoreV1Api, namespace: str, targets: list[tuple[str, str, int]] | list[str],
           script: str = PROBE, labels: dict[str, str] | None = None,
           volumes: list[dict[str, Any]] | None = None) -> dict[str, str]:
    name = f"probe-{int(time.time() * 1000) % 100000}"
    hardened = {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}}
    pod: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels or {}},
        "spec": {"restartPolicy": "Never", "automountServiceAccountToken": False,
                 "securityContext": {"runAsNonRoot": True, "runAsUser": 10001, "seccompProfile": {"type": "RuntimeDefault"}},
                 "containers": [{"name": "probe", "image": IMAGE, "imagePullPolicy": "Never",
                                 "command": ["python", "-c", script,
                                             *([json.dumps(targets)] if script is PROBE else targets)],
                                 "securityContext": hardened,
                                 "volumeMounts": [{"name": v["name"], "mountPath": f"/ca/{v['name']}"}
                                                  for v in volumes or []]}],
                 "volumes": volumes or []},
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



def test_past_the_network_redis_and_zookeeper_speak_tls_alone_with_a_certificate_of_their_ca(
        kube: client.ApiClient, namespace: str, operator: str) -> None:
    core = client.CoreV1Api(kube)
    wearing_a_workers_labels = {"app.kubernetes.io/managed-by": "ftpipeline-operator", "app.kubernetes.io/component": "worker"}
    cas = [{"name": store, "secret": {"secretName": f"ftp-ftpipeline-{store}-tls", "items": [{"key": "ca.crt", "path": "ca.crt"}]}}
           for store in ("redis", "zookeeper")]
    hosts = [f"ftp-ftpipeline-{store}.{namespace}.svc" for store in ("redis", "zookeeper")]
    seen = _probe(core, namespace, hosts, TLS_PROBE, wearing_a_workers_labels, cas)
    print(seen)
    assert "PONG" not in seen["redis plaintext"] and "NOAUTH" not in seen["redis plaintext"], seen
    assert "Mode" not in seen["zookeeper plaintext"], seen
    assert seen["redis, system CAs"] == "untrusted" and seen["zookeeper, system CAs"] == "untrusted", seen
    assert seen["redis, its CA"].startswith("tls:") and "NOAUTH" in seen["redis, its CA"], "TLS, and still a password"
    assert seen["zookeeper, its CA"].startswith("tls:"), seen
