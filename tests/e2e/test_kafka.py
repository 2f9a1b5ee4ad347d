"""Kafka -> aggregate -> Kafka on the local cluster, with a worker pod deleted mid-run.

The chart runs its optional broker (``kafka.enabled``); the pipeline names
no cluster, so the operator gives it that one. The test writes the input
from this machine (the broker advertises its pod's address, which this
machine reaches) and reads the output topic as a downstream consumer would,
``read_committed``. The oracle is the plain PySpark batch job over the same
records, each tagged with the step that read it from the run's step log in
the chart's Redis (checkpoints stay off here, so nothing trims it).
"""

from __future__ import annotations

import gzip
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from ftpipeline.objectstore.base import open_store
from ftpipeline.control import access
from ftpipeline.control.store import RunStore
from ftpipeline.control import history as step_history
from ftpipeline.kafka.topics import create_topics, produce
from ftpipeline.oracle import compare
from ftpipeline.spec import parse_pipeline
from ftpipeline_operator import render

from .conftest import IMAGE
from .test_control_plane import _chart_redis, _secret
from .test_operator import GROUP, PLURAL, ROOT, VERSION, chart, finished, spark, status, wait_for  # noqa: F401

EXAMPLE = ROOT / "examples" / "kafka-clickstream"
RECORDS, PER_STEP = 12_000, 1_500


@pytest.fixture
def broker_operator(kube: client.ApiClient, namespace: str, crd: str) -> Iterator[str]:
    with chart(namespace, "--set", "kafka.enabled=true,kafka.persistence.enabled=false",
               "--set", "kafka.resources.requests.cpu=10m") as release:
        yield release


def _broker(core: client.CoreV1Api, namespace: str) -> str:
    [pod] = core.list_namespaced_pod(namespace, label_selector="app.kubernetes.io/component=kafka").items
    return f"{pod.status.pod_ip}:9092"


def _input() -> list[bytes]:
    """The example's first events, the well-formed ones (a pipeline on Kubernetes names its dead-letter volume)."""
    lines = gzip.decompress((EXAMPLE / "clicks.jsonl.gz").read_bytes()).splitlines()[:RECORDS]
    good = []
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event.get("amount_cents"), int):
            good.append(line)
    return good


def _pipeline(namespace: str, name: str) -> dict[str, Any]:
    doc = yaml.safe_load((EXAMPLE / "pipeline.yaml").read_text())
    doc["metadata"] = {"name": name, "namespace": namespace}
    spec = doc["spec"]
    spec.update(image=IMAGE, imagePullPolicy="Never", workers=2, entryPoint="/opt/ftpipeline/examples/"
                "kafka-clickstream/clickstream.py",
                spark={"resources": {"requests": {"cpu": "10m"}}}, sidecar={"resources": {"requests": {"cpu": "10m"}}})
    del spec["kafka"]  # no cluster named: the chart's
    for stage in spec["stages"]:
        if "source" in stage:
            stage["source"]["kafka"].update(topic=f"{name}-clicks", maxRecordsPerStep=PER_STEP)
        if "sink" in stage:
            stage["sink"]["kafka"]["topic"] = f"{name}-totals"
    return doc


def _history(core: client.CoreV1Api, namespace: str, body: dict[str, Any], steps: int, path: Path) -> Path:
    """The run's step log, read from the chart's Redis as its admin, as the oracle's step history."""
    password = _secret(core, namespace, "ftp-ftpipeline-redis-auth", "password")
    redis = _chart_redis(core, namespace, access.with_credentials("rediss://redis", "", password))
    store = RunStore(redis, render.identity(body))
    for step in range(1, steps + 1):
        record = store.step(step)
        assert record is not None, f"step {step} is not in the step log"
        step_history.remember(open_store(path), "redis", record.to_json())
    return path


def test_kafka_to_kafka_with_a_deleted_worker_pod_equals_the_oracle(
        kube: client.ApiClient, namespace: str, broker_operator: str, spark: object, tmp_path: Path) -> None:
    api = client.CustomObjectsApi(kube)
    core = client.CoreV1Api(kube)
    name = f"kclicks-{uuid.uuid4().hex[:6]}"
    bootstrap = _broker(core, namespace)
    create_topics(bootstrap, {f"{name}-clicks": 3, f"{name}-totals": 2})
    events = _input()
    assert produce(bootstrap, f"{name}-clicks", events) == len(events)
    doc = _pipeline(namespace, name)
    # the pod must go while the run is still going: with its plans reused the example's steps take tens of
    # milliseconds (dataflow/arrow_plans.py) and the run can end before the deletion lands, so here every task
    # calls the functions in Spark again, a step's pace before that
    doc["spec"]["reusePlans"] = False
    api.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, doc)
    wait_for("step 2 committed", lambda: (status(api, namespace, name).get("committedStep") or 0) >= 2, 300)
    core.delete_namespaced_pod(f"{name}-w1", namespace)
    final = finished(api, namespace, name)
    assert final["phase"] == "Succeeded", final
    assert final["recoveries"] >= 1 and final["lastRecovery"]["worker"] == "w1", final
    steps = final["committedStep"]
    assert steps >= len(events) // PER_STEP, final
    body = api.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
    history = _history(core, namespace, body, steps, tmp_path / "history")
    local = yaml.safe_load(yaml.safe_dump(doc))
    local["metadata"] = {"name": name}
    local["spec"]["entryPoint"] = str(EXAMPLE / "clickstream.py")
    local["spec"]["kafka"] = {"bootstrapServers": bootstrap}
    spec = parse_pipeline(yaml.safe_dump(local), ROOT, check_entry_point=True)
    [result] = compare(spark, spec, steps, history)
    print(f"recovered {final['lastRecovery']}; output {result}")
    assert result.duplicates == 0 and result.missing == 0, result
    assert result.equal, result
