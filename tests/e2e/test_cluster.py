"""The cluster itself: it runs the project image, reports deletions promptly, validates CRDs, provisions volumes.

These are the properties the operator relies on, checked on whatever
cluster KUBECONFIG names.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from ftpipeline.spec import SpecError, parse_pipeline

from .conftest import IMAGE, create_namespace

ROOT = Path(__file__).resolve().parents[2]

# a worker's session; -Xshare:on: its JVM refuses to start unless it maps the image's class archive
SPARK_COUNT = (
    "import tempfile\n"
    "from pathlib import Path\n"
    "from ftpipeline.worker import jvmarchive\n"
    "from ftpipeline.worker.session import build_session\n"
    "print('ARCHIVE', jvmarchive.java_options(), flush=True)\n"
    "spark = build_session('local[1]', {}, Path(tempfile.mkdtemp()), 'count', '-Xshare:on')\n"
    "print('COUNT', spark.range(100000).filter('id % 7 = 0').count(), flush=True)\n"
    "spark.stop()\n"
)
SLEEP = "import signal, sys, time\nsignal.signal(signal.SIGTERM, lambda *a: sys.exit(0))\ntime.sleep(3600)\n"


@pytest.fixture
def namespace(kube: client.ApiClient) -> Iterator[str]:
    """The cluster's own tests (not the product's) inspect the node through a hostPath, which the restricted
    Pod Security level of the product's namespaces refuses: theirs has no level."""
    name = create_namespace(kube, "cluster", restricted=False)
    yield name
    client.CoreV1Api(kube).delete_namespace(name, grace_period_seconds=0)


def _pod(name: str, code: str, restart: str = "Never") -> client.V1Pod:
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, labels={"app": "ftpipeline-e2e"}),
        spec=client.V1PodSpec(
            restart_policy=restart,
            containers=[client.V1Container(
                name="main", image=IMAGE, image_pull_policy="Never", command=["python", "-c", code],
                security_context=client.V1SecurityContext(run_as_non_root=True, allow_privilege_escalation=False),
            )],
        ),
    )


def _wait_phase(core: client.CoreV1Api, ns: str, name: str, phases: set[str], timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    phase = ""
    while time.monotonic() < deadline:
        phase = core.read_namespaced_pod(name, ns).status.phase
        if phase in phases:
            return phase
        time.sleep(0.5)
    raise AssertionError(f"pod {name} still {phase!r} after {timeout_s}s")


def test_a_pod_from_the_project_image_runs_spark(kube: client.ApiClient, namespace: str) -> None:
    core = client.CoreV1Api(kube)
    core.create_namespaced_pod(namespace, _pod("spark-count", SPARK_COUNT))
    assert _wait_phase(core, namespace, "spark-count", {"Succeeded", "Failed"}, 300) == "Succeeded", \
        core.read_namespaced_pod_log("spark-count", namespace)
    said = core.read_namespaced_pod_log("spark-count", namespace)
    assert "COUNT 14286" in said
    assert "ARCHIVE -XX:SharedArchiveFile=/opt/jvm/spark.jsa " in said  # the image's, which the JVM mapped


def test_a_deleted_pod_is_seen_deleted(kube: client.ApiClient, namespace: str) -> None:
    core = client.CoreV1Api(kube)
    core.create_namespaced_pod(namespace, _pod("sleeper", SLEEP))
    _wait_phase(core, namespace, "sleeper", {"Running"}, 120)
    seen: dict[str, float] = {}
    started = threading.Event()

    def watch_pods() -> None:
        w = watch.Watch()
        started.set()
        for event in w.stream(core.list_namespaced_pod, namespace, timeout_seconds=60):
            if event["type"] == "DELETED" and event["object"].metadata.name == "sleeper":
                seen["deleted"] = time.monotonic()
                w.stop()

    thread = threading.Thread(target=watch_pods, daemon=True)
    thread.start()
    started.wait()
    time.sleep(0.5)  # let the watch connect
    deleted_at = time.monotonic()
    core.delete_namespaced_pod("sleeper", namespace)
    thread.join(30)
    assert "deleted" in seen, "no DELETED event"
    # how soon is measured and printed, not asserted: timing belongs to benchmarks and metrics
    print(f"DELETED event {seen['deleted'] - deleted_at:.3f}s after the delete call")


def _until(what: str, check: Callable[[], bool], timeout_s: float) -> float:
    """Seconds until ``check()`` holds; fails the test after ``timeout_s``."""
    started = time.monotonic()
    while not check():
        if time.monotonic() - started > timeout_s:
            raise AssertionError(f"{what}: not after {timeout_s}s")
        time.sleep(0.2)
    return time.monotonic() - started


def _sh(name: str, script: str, volume: client.V1Volume, mount: str, env: dict[str, str],
        read_only: bool = False) -> client.V1Pod:
    """A pod of the project image running ``script`` as the image's uid 10001, with one volume."""
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, labels={"app": "ftpipeline-e2e"}),
        spec=client.V1PodSpec(
            restart_policy="Never", volumes=[volume],
            containers=[client.V1Container(
                name="main", image=IMAGE, image_pull_policy="Never", command=["sh", "-c", script],
                env=[client.V1EnvVar(name=k, value=v) for k, v in env.items()],
                volume_mounts=[client.V1VolumeMount(name=volume.name, mount_path=mount, read_only=read_only)],
                security_context=client.V1SecurityContext(run_as_user=10001, run_as_non_root=True,
                                                          allow_privilege_escalation=False),
            )],
        ),
    )


# each writer publishes its file atomically, waits for its peer's and reads it
WRITE_THEN_READ = (
    'set -eu; echo "hello from $ME" > /data/.$ME; mv /data/.$ME /data/$ME; i=0; '
    'while [ ! -f /data/$PEER ]; do i=$((i+1)); [ $i -le 600 ] || exit 3; sleep 0.2; done; '
    'echo "uid=$(id -u) read: $(cat /data/$PEER)"'
)
# what the node holds for one volume directory, seen through a read-only hostPath of its parent
ON_NODE = ('if [ -d "/node/$DIR" ]; then echo "present $(stat -c %a "/node/$DIR")" $(ls "/node/$DIR"); '
           'else echo absent; fi')


def _on_node(core: client.CoreV1Api, ns: str, name: str, path: str) -> str:
    parent, _, folder = path.rstrip("/").rpartition("/")
    host = client.V1Volume(name="node", host_path=client.V1HostPathVolumeSource(path=parent, type="Directory"))
    core.create_namespaced_pod(ns, _sh(name, ON_NODE, host, "/node", {"DIR": folder}, read_only=True))
    assert _wait_phase(core, ns, name, {"Succeeded", "Failed"}, 120) == "Succeeded", \
        core.read_namespaced_pod_log(name, ns)
    return str(core.read_namespaced_pod_log(name, ns)).strip()


def test_a_readwritemany_claim_of_the_default_class_is_shared_and_deleted(kube: client.ApiClient,
                                                                          namespace: str) -> None:
    core, storage = client.CoreV1Api(kube), client.StorageV1Api(kube)
    claim = client.V1PersistentVolumeClaim(
        metadata=client.V1ObjectMeta(name="shared"),
        spec=client.V1PersistentVolumeClaimSpec(  # no storageClassName: the default class
            access_modes=["ReadWriteMany"],
            resources=client.V1VolumeResourceRequirements(requests={"storage": "64Mi"})),
    )
    created = core.create_namespaced_persistent_volume_claim(namespace, claim)
    cls = storage.read_storage_class(created.spec.storage_class_name)
    assert (cls.metadata.annotations or {}).get("storageclass.kubernetes.io/is-default-class") == "true"
    print(f"default class {cls.metadata.name}: {cls.provisioner}, {cls.volume_binding_mode}, {cls.reclaim_policy}")

    data = client.V1Volume(name="data",
                           persistent_volume_claim=client.V1PersistentVolumeClaimVolumeSource(claim_name="shared"))
    for me, peer in (("a", "b"), ("b", "a")):
        core.create_namespaced_pod(namespace, _sh(f"writer-{me}", WRITE_THEN_READ, data, "/data",
                                                  {"ME": me, "PEER": peer}))
    bound_s = _until("claim Bound", lambda: core.read_namespaced_persistent_volume_claim(
        "shared", namespace).status.phase == "Bound", 180)
    print(f"claim Bound {bound_s:.1f}s after its first consumer was created")
    for me, peer in (("a", "b"), ("b", "a")):
        name = f"writer-{me}"
        assert _wait_phase(core, namespace, name, {"Succeeded", "Failed"}, 180) == "Succeeded", \
            core.read_namespaced_pod_log(name, namespace)
        assert core.read_namespaced_pod_log(name, namespace).strip() == f"uid=10001 read: hello from {peer}"

    pv = core.read_persistent_volume(core.read_namespaced_persistent_volume_claim("shared", namespace).spec.volume_name)
    assert pv.spec.access_modes == ["ReadWriteMany"]
    path = (pv.spec.host_path or pv.spec.local).path
    # the directory is on the node, writable by everyone (the pods' uid is not the helper's), holding both files
    assert _on_node(core, namespace, "node-before", path) == "present 777 a b"

    for me in ("a", "b"):
        core.delete_namespaced_pod(f"writer-{me}", namespace)
    core.delete_namespaced_persistent_volume_claim("shared", namespace)

    def pv_gone() -> bool:
        try:
            core.read_persistent_volume(pv.metadata.name)
            return False
        except ApiException as exc:
            if exc.status != 404:
                raise
            return True

    deleted_s = _until("volume deleted", pv_gone, 180)
    print(f"volume {pv.metadata.name} deleted {deleted_s:.1f}s after its claim")
    assert _on_node(core, namespace, "node-after", path) == "absent"


def _broken(change: str) -> Callable[[dict[str, Any]], None]:
    """A change to a valid FTPipeline, written as ``path=value`` (value YAML; ``path=`` deletes)."""
    where, _, value = change.partition("=")

    def apply(doc: dict[str, Any]) -> None:
        *parents, last = where.split(".")
        node = doc
        for part in parents:
            node = node[int(part)] if part.isdigit() else node.setdefault(part, {})
        if value == "":
            del node[last]
        elif last.isdigit():
            node[int(last)] = yaml.safe_load(value)
        else:
            node[last] = yaml.safe_load(value)

    return apply


MALFORMED = [
    # (change, field the API server names, words of its message)
    ("spec.workers=two", "spec.workers", "must be of type integer"),
    ("spec.recovery.strategy=magic", "spec.recovery.strategy", "Unsupported value"),
    ("spec.workers=0", "spec.workers", "greater than or equal to 1"),
    ("spec.checkpoint.intervalSteps=-5", "spec.checkpoint.intervalSteps", "greater than or equal to 0"),
    ("spec.entryPoint=", "spec.entryPoint", "Required value"),
    ("spec.stages.1.parallelism=1000000", "spec.stages[1].parallelism", "less than or equal to 512"),
    ("spec.wrokers=2", "spec.wrokers", "unknown field"),
    ("metadata.name=" + "a" * 120, "metadata.name", "Too long"),  # pods and Services are named after it
]


def test_a_valid_ftpipeline_is_accepted(kube: client.ApiClient, namespace: str, crd: str) -> None:
    api = client.CustomObjectsApi(kube)
    valid = yaml.safe_load((ROOT / "examples" / "clickstream" / "pipeline.yaml").read_text())
    created = api.create_namespaced_custom_object("ftpipeline.io", "v1alpha1", namespace, "ftpipelines", valid,
                                                  field_validation="Strict")
    # the API server applied the schema's defaults
    assert created["spec"]["suspend"] is False
    assert created["spec"]["progressDeadlineSeconds"] == 600
    # no pull policy by default: without spec.image the workers take the operator's image and its policy
    assert "imagePullPolicy" not in created["spec"]


@pytest.mark.parametrize(("change", "field", "words"), MALFORMED, ids=[m[0].split("=")[0] for m in MALFORMED])
def test_a_malformed_ftpipeline_is_rejected_naming_the_field(kube: client.ApiClient, namespace: str, crd: str,
                                                           change: str, field: str, words: str) -> None:
    api = client.CustomObjectsApi(kube)
    doc = yaml.safe_load((ROOT / "examples" / "clickstream" / "pipeline.yaml").read_text())
    doc["metadata"]["name"] = "bad"
    _broken(change)(doc)
    with pytest.raises(ApiException) as err:
        api.create_namespaced_custom_object("ftpipeline.io", "v1alpha1", namespace, "ftpipelines", doc,
                                            field_validation="Strict")
    assert err.value.status in (400, 422), err.value.body
    message = json.loads(err.value.body)["message"]
    print(f"{change}: {message}")
    assert field in message and words in message, message
    assert "some validation rules were not checked" not in message, message  # the CRD carries no CEL rule
    # ftpipeline run refuses the same document naming the same field, before anything starts
    with pytest.raises(SpecError) as local:
        parse_pipeline(yaml.safe_dump(doc), ROOT / "examples" / "clickstream", check_entry_point=False)
    # (the same field, or for a rule over spec.stages the stage itself: spec.stages[3].name)
    assert any(p.path == field or p.path.startswith(field + "[") for p in local.value.problems), local.value.problems
