"""The operator on a real cluster: helm install, kubectl apply, a deleted worker pod, the oracle.

The chart is installed from this repository with the project image; the
operator mounts no pipeline storage. The pipeline's output and checkpoints
go to a node directory, which only its worker pods mount (through a claim of a
hostPath PersistentVolume, as the namespace's restricted Pod Security level
refuses a hostPath in a pod) and the test reads back (the cluster built by
``tests.e2e.cluster`` runs on this machine; elsewhere set
FTPIPELINE_E2E_HOSTPATH to a node directory mounted here). The oracle is one
plain PySpark batch job over the same input.
"""

from __future__ import annotations

import contextlib

import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from kubernetes import client

from ftpipeline.control import history as step_history
from ftpipeline.oracle import compare
from ftpipeline_operator import render
from ftpipeline.spec import parse_pipeline

from . import dashboard
from .conftest import IMAGE, Prometheus, create_namespace, example_pipeline

ROOT = Path(__file__).resolve().parents[2]
HOST_ROOT = Path(os.environ.get("FTPIPELINE_E2E_HOSTPATH", "/var/lib/ftpipeline-e2e-data"))
RUNTIME_UID = 10001
GROUP, VERSION, PLURAL = "ftpipeline.io", "v1alpha1", "ftpipelines"

pytestmark = pytest.mark.skipif(shutil.which("helm") is None, reason="no helm on PATH")


def _writable_dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    os.chown(path, RUNTIME_UID, RUNTIME_UID)
    return path


def new_namespace(kube: client.ApiClient, prefix: str) -> str:
    """A namespace of its own (for pipelines apart from the operator's), Pod Security level restricted."""
    return create_namespace(kube, prefix)


def _install(namespace: str, *values: str) -> str:
    """The chart installed into the test's namespace (the CRD comes from the crd fixture)."""
    repo, _, tag = IMAGE.rpartition(":")
    release = "ftp"
    out = subprocess.run(
        ["helm", "install", release, str(ROOT / "charts" / "ftpipeline"), "--namespace", namespace,
         "--set", f"image.repository={repo},image.tag={tag},image.pullPolicy=Never,crds.enabled=false",
         "--set", "operator.resources.requests.cpu=10m,redis.resources.requests.cpu=10m",
         "--set", "zookeeper.resources.requests.cpu=10m", *values,
         "--wait", "--timeout", "5m"],
        capture_output=True, text=True)
    if out.returncode != 0:
        raise AssertionError(f"helm install into {namespace} failed: {out.stderr.strip()}\n"
                             + "\n".join(pods_not_ready(namespace)))
    return release


def pods_not_ready(namespace: str) -> list[str]:
    """Why an install did not become ready: each pod's phase and waiting reasons, and the namespace's warnings."""
    from kubernetes import config

    api = client.CoreV1Api(config.new_client_from_config())
    lines = []
    for pod in api.list_namespaced_pod(namespace).items:
        waiting = [f"{c.name}: {c.state.waiting.reason} {c.state.waiting.message or ''}".strip()
                   for c in pod.status.container_statuses or [] if c.state and c.state.waiting]
        lines.append(f"pod {pod.metadata.name} {pod.status.phase} {'; '.join(waiting)}".strip())
    lines += [f"event {e.involved_object.kind}/{e.involved_object.name} {e.reason}: {e.message}"
              for e in api.list_namespaced_event(namespace).items if e.type == "Warning"]
    return lines


@contextlib.contextmanager
def chart(namespace: str, *values: str) -> Iterator[str]:
    """The chart installed for the block (``_install``), uninstalled after it."""
    release = _install(namespace, *values)
    try:
        yield release
    finally:
        subprocess.run(["helm", "uninstall", release, "--namespace", namespace, "--wait"], capture_output=True)


@pytest.fixture
def operator(kube: client.ApiClient, namespace: str, crd: str) -> Iterator[str]:
    with chart(namespace) as release:
        yield release


@pytest.fixture
def crashing_operator(kube: client.ApiClient, namespace: str, crd: str) -> Iterator[str]:
    """An operator that SIGKILLs itself right after it wrote its first recovery epoch to the command log."""
    with chart(namespace, "--set", "operator.extraEnv[0].name=FTPIPELINE_CRASH_AFTER",
               "--set", "operator.extraEnv[0].value=recovery") as release:
        yield release


def pipeline(namespace: str, name: str, steps: int, data: Path) -> dict[str, Any]:
    doc = example_pipeline()
    doc["metadata"] = {"name": name, "namespace": namespace}
    spec = doc["spec"]
    spec["image"] = IMAGE
    spec["imagePullPolicy"] = "Never"
    spec["workers"] = 2
    spec["steps"]["maxSteps"] = steps
    spec["checkpoint"]["intervalSteps"] = 3
    spec["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": f"{name}-data"}}]  # create_pipeline
    spec["volumeMounts"] = [{"name": "data", "mountPath": f"/data/{name}"}]
    spec["checkpoint"]["storage"]["path"] = f"/data/{name}/checkpoints"
    spec["deadLetter"]["path"] = f"/data/{name}/dead-letter"
    spec["spark"] = {"resources": {"requests": {"cpu": "10m"}}}
    spec["sidecar"] = {"resources": {"requests": {"cpu": "10m"}}}
    for stage in spec["stages"]:
        stage["parallelism"] = 2
        if "source" in stage:
            stage["source"]["generator"]["rowsPerStep"] = 6000
        if "sink" in stage:
            stage["sink"]["parquet"]["path"] = f"/data/{name}/out"
    return doc


def host_claim(core: client.CoreV1Api, namespace: str, claim: str, path: Path) -> None:
    """A claim of ``path`` on the node: a hostPath PersistentVolume bound to it alone. The test reads the
    output back from this machine, and a pod that mounts a claim is admitted under the restricted Pod Security
    level, which refuses a hostPath in the pod itself."""
    volume = f"{namespace}-{claim}"
    core.create_persistent_volume(cast(Any, {
        "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": volume},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteMany"], "storageClassName": "",
                 "persistentVolumeReclaimPolicy": "Retain", "hostPath": {"path": str(path), "type": "Directory"},
                 "claimRef": {"namespace": namespace, "name": claim}}}))
    core.create_namespaced_persistent_volume_claim(namespace, cast(Any, {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": claim},
        "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "", "volumeName": volume,
                 "resources": {"requests": {"storage": "1Gi"}}}}))


def create_pipeline(api: client.CustomObjectsApi, doc: dict[str, Any], data: Path) -> None:
    """The FTPipeline of ``pipeline()``, with the claim of ``data`` its volume names."""
    namespace, name = doc["metadata"]["namespace"], doc["metadata"]["name"]
    host_claim(client.CoreV1Api(api.api_client), namespace, f"{name}-data", data)
    api.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, doc)


def oracle_spec(doc: dict[str, Any], data: Path) -> Any:
    """The same pipeline as ``ftpipeline run`` would see it here: entry point from the repo, output on the host."""
    local = yaml.safe_load(yaml.safe_dump(doc))
    local["metadata"] = {"name": doc["metadata"]["name"]}
    local["spec"]["entryPoint"] = str(ROOT / "examples" / "clickstream" / "clickstream.py")
    for stage in local["spec"]["stages"]:
        if "sink" in stage:
            stage["sink"]["parquet"]["path"] = str(data / "out")
    return parse_pipeline(yaml.safe_dump(local), ROOT, check_entry_point=True)


def status(api: client.CustomObjectsApi, namespace: str, name: str) -> dict[str, Any]:
    obj = api.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
    return dict(obj.get("status") or {})


def wait_for(what: str, check: Any, timeout_s: float) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def start(api: client.CustomObjectsApi, namespace: str, prefix: str, steps: int, until: int
          ) -> tuple[str, dict[str, Any], Path]:
    """Apply a pipeline of ``steps`` steps and wait until step ``until`` committed."""
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    data = _writable_dir(HOST_ROOT / name)
    doc = pipeline(namespace, name, steps, data)
    create_pipeline(api, doc, data)
    wait_for(f"step {until} committed",
             lambda: (status(api, namespace, name).get("committedStep") or 0) >= until, 300)
    return name, doc, data


def deleted(api: client.CustomObjectsApi, namespace: str, name: str) -> bool:
    """Gone from the API server (its finalizer done)."""
    try:
        api.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
        return False
    except client.exceptions.ApiException as exc:
        return exc.status == 404


def events(core: client.CoreV1Api, namespace: str, name: str, reason: str) -> list[str]:
    """The messages of the Events of ``reason`` about the object ``name``."""
    items = core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}").items
    return [e.message for e in items if e.reason == reason]


def finished(api: client.CustomObjectsApi, namespace: str, name: str) -> dict[str, Any]:
    return dict(wait_for("the pipeline to finish",
                         lambda: (s := status(api, namespace, name)).get("phase") in ("Succeeded", "Failed") and s,
                         600))


@pytest.fixture(scope="module")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    from ftpipeline.worker.session import build_session

    session = build_session("local[2]", {}, tmp_path_factory.mktemp("oracle-spark"), "ftpipeline-e2e-oracle")
    yield session
    session.stop()


def test_a_deleted_worker_pod_is_recovered_and_the_output_equals_the_oracle(
        kube: client.ApiClient, namespace: str, operator: str, spark: object, prometheus: Prometheus) -> None:
    api = client.CustomObjectsApi(kube)
    core = client.CoreV1Api(kube)
    name = f"clicks-{uuid.uuid4().hex[:6]}"
    data = _writable_dir(HOST_ROOT / name)
    steps = 12
    began = time.time()
    doc = pipeline(namespace, name, steps, data)
    # a step a second: the sidecars live long enough to be scraped (unpaced, a run ended before any was once)
    doc["spec"]["steps"]["trigger"] = {"records": 1_000_000_000, "timerMs": 1000}
    create_pipeline(api, doc, data)
    # the sidecars' counters go with their pods at the run's end: watched while they are scraped
    tasks_query = f'sum(ftpipeline_worker_tasks_total{{pipeline="{namespace}/{name}"}})'
    tasks_seen = prometheus.watch(tasks_query)
    subprocess.run(["kubectl", "wait", "--for=condition=Ready", f"ftpipeline/{name}", "-n", namespace,
                    "--timeout=300s"], check=True, capture_output=True, text=True)
    wait_for("step 3 committed", lambda: (status(api, namespace, name).get("committedStep") or 0) >= 3, 300)
    scraped = time.monotonic() + 60
    while not prometheus.query(tasks_query):
        assert time.monotonic() < scraped and status(api, namespace, name).get("phase") == "Running", \
            ("no sidecar scraped while the run ran", prometheus.health())
        time.sleep(0.5)
    victim = f"{name}-w1"
    core.delete_namespaced_pod(victim, namespace)
    # READY counts what is there: one worker fewer until the replacement joins
    wait_for("status to count the lost worker", lambda: status(api, namespace, name).get("workers", {}).get("ready")
             == 1, 60)
    final = finished(api, namespace, name)
    assert final["phase"] == "Succeeded", final
    assert final["committedStep"] == steps
    assert final["recoveries"] >= 1
    assert final["lastRecovery"]["worker"] == "w1"
    assert final["lastRecovery"]["strategy"] in ("lineage", "checkpoint")
    conditions = {c["type"]: c["status"] for c in final["conditions"]}
    assert conditions["Degraded"] == "False" and conditions.get("Failed", "False") == "False", final
    events = core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}").items
    recovered = [e for e in events if e.reason == "Recovered"]
    assert recovered and final["lastRecovery"]["strategy"] in recovered[-1].message
    print(f"recovered: {final['lastRecovery']}")
    # a real Prometheus scraped the operator and the sidecars through pod discovery
    recoveries = wait_for("Prometheus to see the recovery", lambda: prometheus.query(
        f'sum(ftpipeline_recoveries_total{{pipeline="{namespace}/{name}"}})'), 60)
    assert recoveries >= 1
    start = prometheus.query(f'max(ftpipeline_recovery_start_seconds_sum{{pipeline="{namespace}/{name}"}})')
    print(f"Prometheus: recoveries {recoveries:.0f}, pod event to recovery applied {start:.3f} s")
    assert start is not None  # how soon is reported (the metric, this line), not asserted: timing is not a test
    tasks = prometheus.query(f'sum(max_over_time(ftpipeline_worker_tasks_total{{pipeline="{namespace}/{name}"}}[15m]))')
    highest = tasks_seen()
    assert (tasks or 0) > 0 or (highest or 0) > 0, (tasks, highest, prometheus.health())
    # the chart's dashboard: every panel's query, as Grafana sends it, shows this run (once scraped to its end)
    wait_for("Prometheus to see the last step", lambda: prometheus.query(
        f'max(ftpipeline_step_committed{{pipeline="{namespace}/{name}"}})') == steps, 60)
    panels = dashboard.evaluate(prometheus, f"{namespace}/{name}", began, time.time())
    for p in panels:
        print(f"dashboard panel {p.title!r}: {p.series} series, {p.samples} samples")
    assert all(p.series for p in panels), [(p.title, p.expr) for p in panels if not p.series]
    [result] = compare(spark, oracle_spec(doc, data), steps)
    assert result.duplicates == 0, result
    assert result.equal, result
    # deletion runs the finalizer (Redis keys, znodes) while the operator is still there
    api.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
    wait_for("the finalizer to let the FTPipeline go", lambda: deleted(api, namespace, name), 120)


def test_a_restarted_operator_resumes_the_pipeline_with_no_lost_or_repeated_step(
        kube: client.ApiClient, namespace: str, operator: str, spark: object) -> None:
    api = client.CustomObjectsApi(kube)
    core = client.CoreV1Api(kube)
    steps = 24
    name, doc, data = start(api, namespace, "resume", steps, until=5)
    selector = "app.kubernetes.io/component=operator"
    [old] = core.list_namespaced_pod(namespace, label_selector=selector).items
    core.delete_namespaced_pod(old.metadata.name, namespace)
    at_kill = status(api, namespace, name).get("committedStep") or 0
    final = finished(api, namespace, name)
    [new] = [p for p in core.list_namespaced_pod(namespace, label_selector=selector).items
             if p.metadata.name != old.metadata.name]
    print(f"operator {old.metadata.name} deleted at step {at_kill}; {new.metadata.name} finished: {final}")
    assert final["phase"] == "Succeeded", final
    assert final["committedStep"] == steps
    assert at_kill < steps, "the pipeline ended before the operator was killed: nothing was tested"
    [result] = compare(spark, oracle_spec(doc, data), steps)
    assert result.duplicates == 0, result
    assert result.equal, result
    api.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)


def test_an_operator_killed_mid_recovery_resumes_from_the_command_log(
        kube: client.ApiClient, namespace: str, crashing_operator: str, spark: object) -> None:
    """A worker pod is deleted; the operator writes the recovery epoch and dies before applying the plan.
    Its container restarts, folds the command log, and finishes with no lost or repeated step."""
    api = client.CustomObjectsApi(kube)
    core = client.CoreV1Api(kube)
    steps = 18
    name, doc, data = start(api, namespace, "crash", steps, until=4)
    selector = "app.kubernetes.io/component=operator"

    def restarts() -> int:
        [pod] = core.list_namespaced_pod(namespace, label_selector=selector).items
        return sum(c.restart_count for c in pod.status.container_statuses or [])

    assert restarts() == 0
    core.delete_namespaced_pod(f"{name}-w1", namespace)
    at_kill = status(api, namespace, name).get("committedStep") or 0
    wait_for("the operator to crash mid-recovery", lambda: restarts() >= 1, 120)
    final = finished(api, namespace, name)
    print(f"worker pod deleted at step {at_kill}; the operator crashed and its successor finished: {final}")
    assert final["phase"] == "Succeeded", final
    assert final["committedStep"] == steps and at_kill < steps
    [result] = compare(spark, oracle_spec(doc, data), steps)
    assert result.duplicates == 0, result
    assert result.equal, result
    api.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)


def windowed_pipeline(namespace: str, name: str, steps: int) -> dict[str, Any]:
    """``examples/clickstream/kubernetes-windows.yaml`` sized as ``pipeline()`` sizes the plain example."""
    docs = yaml.safe_load_all((ROOT / "examples" / "clickstream" / "kubernetes-windows.yaml").read_text())
    [doc] = [d for d in docs if d and d["kind"] == "FTPipeline"]
    base = pipeline(namespace, name, steps, Path("/unused"))
    doc["metadata"] = base["metadata"]
    for field in ("image", "imagePullPolicy", "workers", "steps", "checkpoint", "deadLetter", "volumes",
                  "volumeMounts", "spark", "sidecar"):
        doc["spec"][field] = base["spec"][field]
    for stage in doc["spec"]["stages"]:
        stage["parallelism"] = 2
        if "source" in stage:
            stage["source"]["generator"]["rowsPerStep"] = 6000
        if "aggregate" in stage:
            stage["aggregate"]["window"]["lateData"]["path"] = f"/data/{name}/late"
        if "sink" in stage:
            stage["sink"]["parquet"]["path"] = f"/data/{name}/out"
    return dict(doc)


def test_the_windowed_example_survives_a_deleted_worker_pod_with_windows_equal_to_the_oracle(
        kube: client.ApiClient, namespace: str, operator: str, spark: object) -> None:
    from ftpipeline.oracle import verify

    api = client.CustomObjectsApi(kube)
    core = client.CoreV1Api(kube)
    steps = 16
    name = f"windows-{uuid.uuid4().hex[:6]}"
    data = _writable_dir(HOST_ROOT / name)
    doc = windowed_pipeline(namespace, name, steps)
    # a step every 600 ms: unpaced, the run had ended before the status said step 4 and the pod went
    doc["spec"]["steps"]["trigger"] = {"records": 1_000_000_000, "timerMs": 600}
    create_pipeline(api, doc, data)
    wait_for("step 4 committed", lambda: (status(api, namespace, name).get("committedStep") or 0) >= 4, 300)
    core.delete_namespaced_pod(f"{name}-w1", namespace)
    final = finished(api, namespace, name)
    assert final["phase"] == "Succeeded" and final["committedStep"] == steps, final
    assert final["recoveries"] >= 1 and final["eventTime"]["watermark"], final
    # the watermark each step ran with, as the releasing workers kept it beside the checkpoints
    body = api.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
    history = data / "checkpoints" / render.identity(body) / "history"
    assert sorted(step_history.clocks(history)) == list(range(1, steps + 1)), history
    local = yaml.safe_load(yaml.safe_dump(doc))
    local["metadata"] = {"name": name}
    local["spec"]["entryPoint"] = str(ROOT / "examples" / "clickstream" / "clickstream.py")
    for stage in local["spec"]["stages"]:
        if "sink" in stage:
            stage["sink"]["parquet"]["path"] = str(data / "out")
        if "aggregate" in stage:
            stage["aggregate"]["window"]["lateData"]["path"] = str(data / "late")
    results = verify(spark, parse_pipeline(yaml.safe_dump(local), ROOT, check_entry_point=True), steps,
                     data / "dead-letter", history)
    for result in results:
        assert result.holds and result.duplicates == 0, result
    assert any(r.sink == "output" and r.expected_rows > 0 for r in results), results
    api.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)


def test_an_evicted_worker_hands_its_channels_over_and_the_budget_refuses_a_second_eviction(
        kube: client.ApiClient, namespace: str, operator: str, spark: object) -> None:
    """What ``kubectl drain`` does to each pod, on the one node: the Eviction API. The first worker evicted hands
    its channels over (no recovery counted, an Event Evacuated); the PodDisruptionBudget refuses to evict the other
    meanwhile, which stays as it was."""
    api = client.CustomObjectsApi(kube)
    core = client.CoreV1Api(kube)
    policy = client.PolicyV1Api(kube)
    steps = 40
    name, doc, data = start(api, namespace, "drain", steps, until=3)
    budget = render.disruption_budget_name(name)
    wait_for("the budget to allow one eviction", lambda: (
        policy.read_namespaced_pod_disruption_budget(budget, namespace).status.disruptions_allowed == 1), 60)

    def evict(worker: str) -> None:
        pod = render.pod_name(name, worker)
        core.create_namespaced_pod_eviction(pod, namespace, client.V1Eviction(
            metadata=client.V1ObjectMeta(name=pod, namespace=namespace)))

    def gone(pod: str) -> bool:
        try:
            core.read_namespaced_pod(pod, namespace)
            return False
        except client.exceptions.ApiException as exc:
            return exc.status == 404

    at_evict, began = status(api, namespace, name).get("committedStep") or 0, time.monotonic()
    evict("w1")
    with pytest.raises(client.exceptions.ApiException) as refused:
        evict("w0")
    assert refused.value.status == 429, refused.value  # the budget: one worker at a time
    w0 = core.read_namespaced_pod(render.pod_name(name, "w0"), namespace)
    assert w0.metadata.deletion_timestamp is None and w0.status.phase == "Running"  # untouched
    wait_for("the evicted pod to go", lambda: gone(render.pod_name(name, "w1")), 60)
    took, at_gone = time.monotonic() - began, status(api, namespace, name).get("committedStep") or 0
    print(f"eviction to pod gone: {took:.2f} s, steps {at_evict} -> {at_gone} meanwhile "
          f"({(at_gone - at_evict) / took:.1f} steps/s)")
    final = finished(api, namespace, name)
    assert final["phase"] == "Succeeded", final
    assert final["committedStep"] == steps
    assert not final.get("recoveries"), final  # a handover, not a recovery
    assert final["lastEvacuation"]["worker"] == "w1", final
    assert events(core, namespace, name, "Evacuated"), "an Event says so"
    assert not events(core, namespace, name, "Recovered"), events(core, namespace, name, "Recovered")
    [result] = compare(spark, oracle_spec(doc, data), steps)
    assert result.equal and result.duplicates == 0, result
