"""What an FTPipeline object resolves to before it runs: the runtime's spec, its endpoints and defaults.

The runner (``runner.py``) and the deletion handler both need the pipeline's
spec as the runtime reads it, with the Redis, ZooKeeper and Kafka endpoints
resolved: from the pipeline's Secrets, or from the operator's defaults (the
chart's in-cluster stores). What is wrong with an object that the CRD's
schema could not judge is said here, naming the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pydantic
from kubernetes import client

from ftpipeline.coordinator.coordinator import PipelineFailed
from ftpipeline.spec.load import checkpoint_interval_given, parse_pipeline
from ftpipeline.spec.model import PipelineSpec
from ftpipeline.spec.schema import DEFAULT_CHECKPOINT_STEPS
from ftpipeline_operator import render
from ftpipeline_operator.objectstores import OperatorStore
from ftpipeline_operator.policy import Policy


class Unrunnable(RuntimeError):
    """The spec cannot run as it is (the API server rejects its worker pod): retrying cannot help."""


@dataclass(frozen=True)
class Defaults:
    """What pipelines that name none get: the chart's in-cluster Redis and ZooKeeper, the operator's image."""

    redis_url: str = ""
    zookeeper: str = ""
    image: str = ""
    image_pull_policy: str = ""
    policy: Policy = Policy()  # what pipelines may put into their pods (the chart's values)
    redis_users: bool = False  # redis_url is an admin's: each pipeline gets a Redis user of its own (stores.py)
    zookeeper_users: bool = False  # zookeeper is the super user's: each pipeline gets an identity of its own
    kafka: str = ""            # the chart's in-cluster broker (kafka.enabled), for pipelines on Kafka that name none
    object_store: OperatorStore | None = None  # the chart's S3 store (objectStore.enabled): objectstores.py


def read_secret(core: client.CoreV1Api, namespace: str, ref: Mapping[str, str], field: str) -> str:
    import base64

    try:
        secret = core.read_namespaced_secret(ref["name"], namespace)
    except client.exceptions.ApiException as exc:
        what = {404: "not found", 403: "not readable by the operator"}.get(exc.status, f"unreadable ({exc.reason})")
        raise PipelineFailed(f"Secret {namespace}/{ref['name']} {what} ({field}.secretRef)") from None
    data = (secret.data or {}).get(ref["key"])
    if data is None:
        raise PipelineFailed(f"Secret {namespace}/{ref['name']} has no key {ref['key']!r} ({field}.secretRef)")
    return base64.b64decode(data).decode()


def pod_problems(exc: pydantic.ValidationError, own_volumes: int) -> str:
    """The client's validation errors of a worker pod as the pipeline's fields (``spec.volumes[i]...``)."""
    out = []
    for error in exc.errors()[:3]:
        loc = list(error["loc"][1:])  # the first element is the argument (the body)
        if loc[:2] == ["spec", "volumes"] and isinstance(loc[2], int) and loc[2] >= own_volumes:
            loc[2] -= own_volumes  # the pipeline's own spec.volumes follow the operator's
        path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")
        out.append(f"{path}: {error['msg']}")
    return "; ".join(out)


def resolve_spec(body: Mapping[str, Any], core: client.CoreV1Api, defaults: Defaults) -> PipelineSpec:
    """The runtime's PipelineSpec of an FTPipeline, with endpoints resolved (Secrets, defaults)."""
    source = f"ftpipeline {body['metadata']['namespace']}/{body['metadata']['name']}"
    spec = parse_pipeline(render.pipeline_document(body), Path(render.PIPELINE_DIR), source=source,
                          check_entry_point=False)
    raw = body["spec"]
    ns = body["metadata"]["namespace"]
    redis_ref = (raw.get("redis") or {}).get("secretRef")
    zk_ref = (raw.get("zookeeper") or {}).get("secretRef")
    redis_url = read_secret(core, ns, redis_ref, "spec.redis") if redis_ref else (spec.redis_url or defaults.redis_url)
    zookeeper = (read_secret(core, ns, zk_ref, "spec.zookeeper") if zk_ref
                 else (spec.zookeeper or defaults.zookeeper or None))
    kafka = raw.get("kafka") or {}
    if spec.uses_kafka and not spec.kafka_bootstrap and not kafka.get("secretRef"):
        if not defaults.kafka:
            raise Unrunnable("the pipeline reads or writes Kafka, but spec.kafka names no cluster (bootstrapServers "
                             "or secretRef) and the operator has no in-cluster broker (the chart's kafka.enabled)")
        spec = replace(spec, kafka_bootstrap=defaults.kafka)
    spec = replace(spec, redis_url=redis_url, zookeeper=zookeeper, identity=render.identity(body),
                   label=render.metrics_label(body))
    return replace(spec, checkpoint_steps=0) if default_checkpoints_lack_storage(raw) else spec


def default_checkpoints_lack_storage(raw: Mapping[str, Any]) -> bool:
    """No interval and no storage given: the default checkpoints stay off on Kubernetes, where a
    checkpoint must be written where every worker (and its replacement) can read it, and the
    pipeline's own directory is a read-only ConfigMap of one pod."""
    return (bool(raw.get("faultTolerance", True)) and not checkpoint_interval_given(raw)
            and "storage" not in (raw.get("checkpoint") or {}))


def checkpoints_off_warning(raw: Mapping[str, Any], spec: PipelineSpec) -> str | None:
    """The Warning Event of a fault-tolerant pipeline that runs without checkpoints, naming why."""
    warning = spec.unbounded_warning
    if warning is None:
        return None
    if default_checkpoints_lack_storage(raw):
        return ("spec.checkpoint.storage.path is not set (a directory on a volume every worker mounts), so "
                f"the default checkpoints every {DEFAULT_CHECKPOINT_STEPS} steps are off; {warning}")
    return f"spec.checkpoint.intervalSteps and intervalMs are 0, so {warning}"
