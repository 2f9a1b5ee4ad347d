"""Kubernetes objects of a pipeline, rendered from its FTPipeline: pure functions, no API calls.

Every object is owned by the FTPipeline (deleting it deletes them) and
labelled so the operator can find a pipeline's pods and Prometheus its
sidecars:

- a **worker pod** per worker: the ``spark`` container (one local
  SparkSession executing tasks) and the ``sidecar`` container (object buffer,
  Arrow Flight transfers, lineage bookkeeping, the control API, ``/metrics``),
  sharing an ``emptyDir`` through which the Spark process finds its sidecar —
  the same two processes ``ftpipeline run`` starts, with the same arguments;
- a headless **Service** selecting the worker pods (stable DNS, metrics
  discovery);
- a **ConfigMap** holding the pipeline document the run uses, mounted
  read-only in every worker, and the CAs of the operator's Redis and
  ZooKeeper when they serve TLS, mounted in the sidecar at the path the
  operator's own copies have (``STORE_CA_DIR``), which its URLs name.

Pods run as the image's non-root user with a read-only root filesystem;
what the processes write goes to ``emptyDir`` volumes or to the volumes the
pipeline declares (``spec.volumes``/``spec.volumeMounts``: output,
checkpoints, dead letters).
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from ftpipeline.kafka.client import CA_ENV
from ftpipeline.spec.cores import master_for_pod
from ftpipeline.spec.load import KAFKA_ENV
from ftpipeline.spec.schema import API_GROUP, API_VERSION, KIND
from ftpipeline.worker.tls import Credentials

FLIGHT_PORT = 7000
METRICS_PORT = 9108
WORK_DIR = "/var/run/ftpipeline"
PIPELINE_DIR = "/etc/ftpipeline"
PIPELINE_FILE = "pipeline.yaml"
TLS_DIR = "/etc/ftpipeline-tls"  # the pipeline's worker credentials, in the sidecar container alone
KAFKA_CA_DIR = "/etc/ftpipeline-kafka"  # ca.crt: spec.kafka.caSecretRef
OBJECT_STORE_CA_DIR = "/etc/ftpipeline-object-store"  # ca.crt: spec.objectStore.caSecretRef
# what a Secret of an object store may hold, each given to the workers as the variable of its name
OBJECT_STORE_KEYS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL",
                     "AWS_REGION", "FTPIPELINE_S3_PATH_STYLE")
STORE_CA_DIR = "/etc/ftpipeline-stores"  # <store>/ca.crt: the CA of the operator's Redis and ZooKeeper
STORES = ("redis", "zookeeper")
RUNTIME_USER = 10001

PIPELINE_LABEL = f"{API_GROUP}/pipeline"
WORKER_LABEL = f"{API_GROUP}/worker"
RUN_LABEL = f"{API_GROUP}/run"
POD_DIGEST = f"{API_GROUP}/pod-digest"  # what a worker pod was rendered from: a pod alike may be taken over

Obj = dict[str, Any]


def labels(name: str, component: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "ftpipeline",
        "app.kubernetes.io/instance": name,
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/managed-by": "ftpipeline-operator",
        PIPELINE_LABEL: name,
    }


def worker_selector(name: str) -> str:
    """Label selector of a pipeline's worker pods."""
    return ",".join(f"{k}={v}" for k, v in worker_labels(name).items())


def identity(body: Mapping[str, Any]) -> str:
    """What the pipeline's Redis keys, znodes and checkpoint sub-path are keyed by: namespace, name and
    uid, so a pipeline of the same name in another namespace, or a re-created one, shares nothing."""
    meta = body["metadata"]
    return f"{meta['namespace']}.{meta['name']}.{meta['uid']}"


def metrics_label(body: Mapping[str, Any]) -> str:
    """The ``pipeline`` label of its metrics (one operator serves every namespace)."""
    return f"{body['metadata']['namespace']}/{body['metadata']['name']}"


def owner_reference(body: Mapping[str, Any]) -> Obj:
    meta = body["metadata"]
    return {"apiVersion": f"{API_GROUP}/{API_VERSION}", "kind": KIND, "name": meta["name"], "uid": meta["uid"],
            "controller": True, "blockOwnerDeletion": True}


def object_meta(body: Mapping[str, Any], name: str, component: str, extra_labels: Mapping[str, str] | None = None) -> Obj:
    return {
        "name": name,
        "namespace": body["metadata"]["namespace"],
        "labels": {**labels(body["metadata"]["name"], component), **(extra_labels or {})},
        "ownerReferences": [owner_reference(body)],
    }


def pipeline_document(body: Mapping[str, Any]) -> str:
    """The FTPipeline as the runtime reads it (the same document ``ftpipeline run`` takes)."""
    doc = {"apiVersion": f"{API_GROUP}/{API_VERSION}", "kind": KIND,
           "metadata": {"name": body["metadata"]["name"]}, "spec": body["spec"]}
    return yaml.safe_dump(doc, sort_keys=False)


def config_map_name(name: str) -> str:
    return f"{name}-pipeline"


def tls_secret_name(name: str) -> str:
    return f"{name}-worker-tls"


def worker_tls_secret(body: Mapping[str, Any]) -> str:
    """The Secret the worker pods mount: the one the pipeline brings (``spec.tls.secretName``) or the
    operator's own."""
    return str((body["spec"].get("tls") or {}).get("secretName") or tls_secret_name(body["metadata"]["name"]))


def tls_secret(body: Mapping[str, Any], credentials: Credentials) -> Obj:
    """The pipeline's worker credentials (``ftpipeline/worker/tls.py``), owned by the FTPipeline: issued
    anew for every run, so a restart rotates them; deleted with the pipeline."""
    name = body["metadata"]["name"]
    return {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
            "metadata": object_meta(body, tls_secret_name(name), "worker-tls"),
            "data": credentials.as_secret_body()}


def store_secret_name(name: str) -> str:
    return f"{name}-store"


STORE_REDIS_KEY = "redis-url"      # the pipeline's own Redis user, in its URL
STORE_ZOOKEEPER_KEY = "zookeeper"  # the pipeline's own ZooKeeper identity, in its connect string


def store_secret(body: Mapping[str, Any], data: Mapping[str, str]) -> Obj:
    """The pipeline's credentials to the shared Redis and ZooKeeper (``stores.py``), owned by the FTPipeline:
    kept across runs (the same users), deleted with the pipeline."""
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": object_meta(body, store_secret_name(body["metadata"]["name"]), "store-credentials"),
            "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}}


def service_name(name: str) -> str:
    return f"{name}-workers"


def pod_name(name: str, worker: str) -> str:
    return f"{name}-{worker}"


def store_ca_key(store: str) -> str:
    return f"{store}-ca.crt"


def config_map(body: Mapping[str, Any], store_cas: Mapping[str, str] | None = None) -> Obj:
    """The pipeline document, and ``store_cas`` (store: PEM): the CAs its sidecars trust the stores with."""
    name = body["metadata"]["name"]
    cas = {store_ca_key(store): pem for store, pem in (store_cas or {}).items()}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": object_meta(body, config_map_name(name), "pipeline"),
            "data": {PIPELINE_FILE: pipeline_document(body), **cas}}


def service(body: Mapping[str, Any]) -> Obj:
    name = body["metadata"]["name"]
    return {
        "apiVersion": "v1", "kind": "Service", "metadata": object_meta(body, service_name(name), "worker"),
        "spec": {
            "clusterIP": "None",
            "selector": {PIPELINE_LABEL: name, "app.kubernetes.io/component": "worker"},
            "ports": [{"name": "flight", "port": FLIGHT_PORT, "targetPort": "flight"},
                      {"name": "metrics", "port": METRICS_PORT, "targetPort": "metrics"}],
            "publishNotReadyAddresses": True,
        },
    }


def _endpoint_env(var: str, endpoint: Mapping[str, Any] | None, field: str, default: str) -> Obj:
    """An env var from a literal endpoint or a Secret reference (``{secretRef: {name, key}}``)."""
    endpoint = endpoint or {}
    ref = endpoint.get("secretRef")
    if ref:
        return {"name": var, "valueFrom": {"secretKeyRef": {"name": ref["name"], "key": ref["key"]}}}
    return {"name": var, "value": endpoint.get(field) or default}


def runtime_env(spec: Mapping[str, Any], defaults: Mapping[str, str]) -> list[Obj]:
    """Where a worker finds Redis and ZooKeeper: the pipeline's own endpoints, else the operator's defaults
    (with ``defaults["redisSecret"]``/``["zookeeperSecret"]``: the pipeline's own users of them, read from
    that Secret, never a literal)."""
    def own(store: str, key: str) -> Obj | None:
        secret = defaults.get(f"{store}Secret")
        return {"secretRef": {"name": secret, "key": key}} if secret else None

    redis = spec.get("redis") or own("redis", STORE_REDIS_KEY)
    zookeeper = spec.get("zookeeper") or own("zookeeper", STORE_ZOOKEEPER_KEY)
    return [_endpoint_env("FTPIPELINE_REDIS_URL", redis, "url", defaults.get("redis", "")),
            _endpoint_env("FTPIPELINE_ZOOKEEPER", zookeeper, "connect", defaults.get("zookeeper", ""))]


def kafka_env(spec: Mapping[str, Any]) -> tuple[list[Obj], list[Obj], list[Obj]]:
    """What both containers of a worker need of ``spec.kafka`` (the Spark process reads sources, the sidecar
    releases sinks): the endpoint from its Secret (``secretRef``: never a literal in the pod), and the CA of
    ``caSecretRef`` mounted at ``KAFKA_CA_DIR``. (env, volume mounts, volumes)."""
    kafka = spec.get("kafka") or {}
    env: list[Obj] = []
    mounts: list[Obj] = []
    volumes: list[Obj] = []
    if kafka.get("secretRef"):
        env.append(_endpoint_env(KAFKA_ENV, kafka, "bootstrapServers", ""))
    ca = kafka.get("caSecretRef")
    if ca:
        env.append({"name": CA_ENV, "value": f"{KAFKA_CA_DIR}/ca.crt"})
        mounts.append({"name": "kafka-ca", "mountPath": KAFKA_CA_DIR, "readOnly": True})
        volumes.append({"name": "kafka-ca", "secret": {"secretName": ca["name"], "defaultMode": 0o440,
                                                       "items": [{"key": ca["key"], "path": "ca.crt"}]}})
    return env, mounts, volumes


def object_store_secret_name(name: str) -> str:
    return f"{name}-object-store"


def object_store_env(spec: Mapping[str, Any], defaults: Mapping[str, str]) -> tuple[list[Obj], list[Obj], list[Obj]]:
    """What both containers of a worker need of the object store (the Spark process writes checkpoints and
    sink parts, the sidecar releases): the keys of ``spec.objectStore.secretRef``'s Secret, else of the
    pipeline's own on the operator's store (``defaults["objectStoreSecret"]``, ``objectstores.py``), as
    variables read from the Secret; the CA of ``caSecretRef`` mounted. (env, volume mounts, volumes)."""
    store = spec.get("objectStore") or {}
    secret = (store.get("secretRef") or {}).get("name") or defaults.get("objectStoreSecret")
    if not secret:
        return [], [], []
    env: list[Obj] = [{"name": key, "valueFrom": {"secretKeyRef": {"name": secret, "key": key, "optional": True}}}
                      for key in OBJECT_STORE_KEYS]
    ca = store.get("caSecretRef")
    if not ca:
        return env, [], []
    env.append({"name": "AWS_CA_BUNDLE", "value": f"{OBJECT_STORE_CA_DIR}/ca.crt"})
    return (env, [{"name": "object-store-ca", "mountPath": OBJECT_STORE_CA_DIR, "readOnly": True}],
            [{"name": "object-store-ca", "secret": {"secretName": ca["name"], "defaultMode": 0o440,
                                                    "items": [{"key": ca["key"], "path": "ca.crt"}]}}])


_HARDENED = {
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "capabilities": {"drop": ["ALL"]},
}


def worker_pod(body: Mapping[str, Any], worker: str, run: str, defaults: Mapping[str, str]) -> Obj:
    """The pod of one worker. ``run`` labels the coordinator session that started it."""
    name = body["metadata"]["name"]
    spec = body["spec"]
    spark = spec.get("spark") or {}
    env = [
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "PYTHONDONTWRITEBYTECODE", "value": "1"},
        {"name": "HOME", "value": "/tmp"},
    ]
    # The Spark container runs user code: it is not told where Redis and ZooKeeper are, nor their
    # credentials; it reaches only its sidecar, through the socket in the shared work directory.
    kafka, kafka_mounts, kafka_volumes = kafka_env(spec)
    objects, object_mounts, object_volumes = object_store_env(spec, defaults)
    env += [*kafka, *objects]
    control = [*env, *runtime_env(spec, defaults)]
    mounts = [{"name": "work", "mountPath": WORK_DIR}, {"name": "tmp", "mountPath": "/tmp"},
              {"name": "pipeline", "mountPath": PIPELINE_DIR, "readOnly": True},
              *kafka_mounts, *object_mounts, *spec.get("volumeMounts", [])]
    own = spec.get("image")  # without one: the operator's image, pulled as the operator's is
    image = own or defaults.get("image")
    if not image:
        raise ValueError("spec.image is not set and the operator has no default image (FTPIPELINE_DEFAULT_IMAGE)")
    pull = spec.get("imagePullPolicy") or (None if own else defaults.get("pullPolicy")) or "IfNotPresent"
    sidecar = {
        "name": "sidecar",
        "image": image,
        "imagePullPolicy": pull,
        "command": ["python", "-m", "ftpipeline.worker.server"],
        "args": ["--worker-id", worker, "--pipeline", identity(body), "--metrics-label", metrics_label(body),
                 "--dir", WORK_DIR, "--bind", "0.0.0.0", "--advertise", "$(POD_IP)",
                 "--port", str(FLIGHT_PORT), "--metrics-port", str(METRICS_PORT),
                 "--heartbeat-timeout-ms",
                 str((spec.get("recovery") or {}).get("heartbeatTimeoutMs", 6000)), "--tls-dir", TLS_DIR],
        "env": control,
        "ports": [{"name": "flight", "containerPort": FLIGHT_PORT}, {"name": "metrics", "containerPort": METRICS_PORT}],
        "readinessProbe": {"tcpSocket": {"port": "flight"}, "periodSeconds": 2},
        "resources": (spec.get("sidecar") or {}).get("resources", {}),
        "securityContext": _HARDENED,
        "volumeMounts": [*mounts, {"name": "worker-tls", "mountPath": TLS_DIR, "readOnly": True}],
    }
    store_cas = [s for s in defaults.get("storeCAs", "").split(",") if s]  # the stores the operator's URLs trust
    if store_cas:
        sidecar["volumeMounts"].append({"name": "store-ca", "mountPath": STORE_CA_DIR, "readOnly": True})
    executor = {
        "name": "spark",
        "image": image,
        "imagePullPolicy": pull,
        "command": ["python", "-m", "ftpipeline.worker.executor"],
        "args": ["--worker-id", worker, "--dir", WORK_DIR, "--spark-master",
                 master_for_pod(spark.get("master", ""), spark.get("resources") or {}),
                 "--spark-conf", json.dumps(spark.get("conf", {}), sort_keys=True)],
        "env": env,
        "resources": spark.get("resources", {}),
        "securityContext": _HARDENED,
        "volumeMounts": [m for m in mounts if m["name"] != "pipeline"],  # the document: the sidecar's
    }
    pod_spec: Obj = {
        "restartPolicy": "Never",  # a worker that exits is lost; recovery, not the kubelet, brings it back
        "terminationGracePeriodSeconds": 30,  # an evicted worker hands its channels over first (worker/leaving.py)
        "enableServiceLinks": False,
        "automountServiceAccountToken": False,
        "securityContext": {"runAsNonRoot": True, "runAsUser": RUNTIME_USER, "runAsGroup": RUNTIME_USER,
                            "fsGroup": RUNTIME_USER, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [executor, sidecar],
        "volumes": [{"name": "work", "emptyDir": {}}, {"name": "tmp", "emptyDir": {}},
                    {"name": "pipeline", "configMap": {"name": config_map_name(name),
                                                       "items": [{"key": PIPELINE_FILE, "path": PIPELINE_FILE}]}},
                    {"name": "worker-tls", "secret": {"secretName": worker_tls_secret(body), "defaultMode": 0o440}},
                    *([{"name": "store-ca", "configMap": {"name": config_map_name(name), "items": [
                        {"key": store_ca_key(s), "path": f"{s}/ca.crt"} for s in store_cas]}}] if store_cas else []),
                    *kafka_volumes, *object_volumes, *spec.get("volumes", [])],
    }
    for key in ("serviceAccountName", "nodeSelector", "tolerations", "affinity", "priorityClassName"):
        if key in spec:
            pod_spec[key] = spec[key]
    spread = spec.get("topologySpreadConstraints", default_spread(name))
    if spread:
        pod_spec["topologySpreadConstraints"] = spread
    meta = object_meta(body, pod_name(name, worker), "worker", {WORKER_LABEL: worker})
    annotations = {"prometheus.io/scrape": "true", "prometheus.io/port": str(METRICS_PORT)}
    pod: Obj = {"apiVersion": "v1", "kind": "Pod", "metadata": {**meta, "annotations": annotations}, "spec": pod_spec}
    annotations[POD_DIGEST] = digest(pod)[:16]  # of the pod as rendered for any run: the run label comes after
    meta["labels"][RUN_LABEL] = run
    return pod


def avoiding(pod: Obj, nodes: Sequence[str], required: bool = False) -> Obj:
    """``pod`` kept off ``nodes`` (the suspects of ``cluster.py``), besides its own affinity: a requirement, or
    only a preference (weighed against the spread, which favours the node its lost pods left empty). Added
    after the pod's digest: where a replacement should not go is no part of what the pod is."""
    if not nodes:
        return pod
    spec = pod["spec"]
    affinity = copy.deepcopy(spec.get("affinity") or {})
    node_affinity = affinity.setdefault("nodeAffinity", {})
    away = {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": list(nodes)}
    if required:  # the terms are alternatives: each one gets the condition
        terms = node_affinity.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {}).setdefault(
            "nodeSelectorTerms", [])
        if not terms:
            terms.append({})
        for term in terms:
            term.setdefault("matchExpressions", []).append(away)
    else:
        node_affinity.setdefault("preferredDuringSchedulingIgnoredDuringExecution", []).append(
            {"weight": 100, "preference": {"matchExpressions": [away]}})
    return {**pod, "spec": {**spec, "affinity": affinity}}


def worker_labels(name: str) -> dict[str, str]:
    """The labels that select a pipeline's worker pods (``worker_selector`` as a matchLabels)."""
    return {PIPELINE_LABEL: name, "app.kubernetes.io/component": "worker"}


def default_spread(name: str) -> list[Obj]:
    """Without ``spec.topologySpreadConstraints``: the workers spread over nodes, as a preference, so that one
    node lost takes as few as the cluster allows (``spec/placement_schema.py``)."""
    return [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway",
             "labelSelector": {"matchLabels": worker_labels(name)}}]


def disruption_budget_name(name: str) -> str:
    return f"{name}-workers"


def disruption_budget(body: Mapping[str, Any]) -> Obj:
    """The PodDisruptionBudget of the worker pods: a drain evicts ``maxUnavailable`` of them at a time. Written as
    ``minAvailable`` (the workers less that): Kubernetes computes a ``maxUnavailable`` only for pods whose owner
    has a scale subresource, which an FTPipeline has not. A worker that is not ready may always be evicted (a
    stuck pod must not block a node's maintenance)."""
    name = body["metadata"]["name"]
    budget = (body["spec"].get("disruptionBudget") or {}).get("maxUnavailable", 1)
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": object_meta(body, disruption_budget_name(name), "disruption-budget"),
            "spec": {"minAvailable": max(0, int(body["spec"].get("workers", 1)) - budget),
                     "selector": {"matchLabels": worker_labels(name)}, "unhealthyPodEvictionPolicy": "AlwaysAllow"}}


def digest(obj: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()
