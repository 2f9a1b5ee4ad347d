"""One pipeline never harms the operator or another: broken pipelines end in one line, a healthy one runs on.

The operator is installed in one namespace and the pipelines live in another
(it watches all), as a platform team runs it. Beside a healthy pipeline,
each broken one must end Failed with a one-line reason in its status, its
conditions and its Events — within its restart budget where a retry could
have helped — and the healthy one's output must still equal the oracle:

- a stage parallelism of 1,000,000: refused by the API server, nothing created;
- a Secret that does not exist; an image that cannot be pulled; a volume the
  API server rejects; an output directory the workers cannot write;
- a stage naming a function the entry point lacks, an entry point that does
  not import, a source directory missing from the volume: Rejected at once
  (the worker cannot run), never replaced;
- a fresh pipeline whose sink already holds an earlier run's steps: Failed
  (ExistingOutput) naming the path and the field, the old steps untouched.
"""

from __future__ import annotations

import base64
import os
import subprocess
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from ftpipeline.oracle import compare
from ftpipeline.worker.tls import SERVER_NAME, generate

from .conftest import dump_operator, failed
from .test_operator import (GROUP, HOST_ROOT, PLURAL, VERSION, _install, _writable_dir, create_pipeline, events,
                            finished, host_claim, new_namespace, oracle_spec, pipeline, wait_for)

pytestmark = pytest.mark.skipif(not os.environ.get("KUBECONFIG"), reason="no cluster")


@pytest.fixture
def tenant(kube: client.ApiClient) -> Iterator[str]:
    """A namespace of the pipelines' own, not the operator's."""
    name = new_namespace(kube, "tenant")
    yield name
    client.CoreV1Api(kube).delete_namespace(name, grace_period_seconds=0)


@pytest.fixture
def installed(kube: client.ApiClient, namespace: str, crd: str, request: pytest.FixtureRequest) -> Iterator[str]:
    release = _install(namespace, "--set", "watchNamespaces={*}")  # the pipelines live in tenants' namespaces
    yield namespace
    if failed(request):
        dump_operator(kube, namespace)
    subprocess.run(["helm", "uninstall", release, "--namespace", namespace, "--wait"], capture_output=True)


def broken(tenant: str, name: str, edit: Any) -> dict[str, Any]:
    """A small pipeline that may retry once, quickly, with ``edit`` applied."""
    data = _writable_dir(HOST_ROOT / name)
    doc = pipeline(tenant, name, 4, data)
    doc["spec"]["workers"] = 1
    for stage in doc["spec"]["stages"]:
        stage["parallelism"] = 1
    doc["spec"]["recovery"].update(restartBudget={"maxRestarts": 1}, backoff={"initialMs": 500, "maxMs": 1000})
    edit(doc)
    return doc


def unwritable(doc: dict[str, Any]) -> None:
    """The output and checkpoints on a directory the kubelet creates root-owned: the runtime user cannot write."""
    name, namespace = doc["metadata"]["name"], doc["metadata"]["namespace"]
    path = HOST_ROOT / f"{name}-root-owned"
    path.mkdir(parents=True, exist_ok=True)
    os.chown(path, 0, 0)
    path.chmod(0o755)
    host_claim(client.CoreV1Api(), namespace, f"{name}-root-owned", path)
    doc["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": f"{name}-root-owned"}}]


def earlier_output(doc: dict[str, Any]) -> None:
    """The sink's directory already holds two released steps of an earlier run (existingOutput: fail)."""
    out = HOST_ROOT / doc["metadata"]["name"] / "out"
    for step in (1, 2):
        (out / f"step={step}").mkdir(parents=True, exist_ok=True)
        (out / f"step={step}" / "part-00000.parquet").write_bytes(b"earlier run")


def missing_input(doc: dict[str, Any]) -> None:
    """A file source whose directory is not on the volume: only the worker sees the volume, and says so."""
    path = f"{doc['spec']['volumeMounts'][0]['mountPath']}/nosuch"
    doc["spec"]["stages"][0]["source"] = {"file": {"path": path, "format": "jsonl", "rowsPerStep": 10,
                                                   "schema": {"user_id": "string"}}}


CASES: dict[str, tuple[Any, str, str]] = {   # edit, reason, what the one line must name
    "secret": (lambda d: d["spec"].update(redis={"secretRef": {"name": "nosuch", "key": "url"}}),
               "RestartBudgetExhausted", "nosuch not found (spec.redis.secretRef)"),
    "image": (lambda d: d["spec"].update(image="localhost/nosuch:1", imagePullPolicy="Never"),
              "RestartBudgetExhausted", "ImagePull"),
    "volume": (lambda d: d["spec"]["volumes"].append({"name": "typo", "persistentVolumeClaim": {"claimNam": "x"}}),
               "Rejected", "invalid worker pod: spec.volumes[1].persistentVolumeClaim.claimName: Field required"),
    "storage": (unwritable, "RestartBudgetExhausted", "Permission denied"),
    "certificate": (lambda d: d["spec"].update(tls={"secretName": "foreign-cert"}),
                    "Rejected", "spec.tls.secretName: Secret foreign-cert: tls.crt names worker.example.com, not "
                                "ftpipeline-worker"),
    # a worker that cannot start for a reason its replacement would share: Rejected at once, never replaced
    "function": (lambda d: d["spec"]["stages"][1]["transform"].update(function="nosuch"),
                 "Rejected", "cannot run: invalid pipeline: spec.stages[1].transform.function: "),
    "module": (lambda d: d["spec"].update(entryPoint="/opt/ftpipeline/examples/nosuch.py"),
               "Rejected", "cannot run: invalid pipeline: spec.entryPoint: cannot import"),
    "input": (missing_input, "Rejected", "cannot run: invalid pipeline: spec.stages[0].source.file.path: /data/"),
    "existing": (earlier_output, "ExistingOutput",
                 "/out already holds output (steps up to 2) and spec.stages[3].sink.existingOutput is fail"),
}


def test_broken_pipelines_end_failed_in_one_line_while_a_healthy_one_runs(
        kube: client.ApiClient, installed: str, tenant: str, spark: object) -> None:
    api = client.CustomObjectsApi(kube)
    core = client.CoreV1Api(kube)
    healthy_name = f"healthy-{uuid.uuid4().hex[:6]}"
    data = _writable_dir(HOST_ROOT / healthy_name)
    healthy = pipeline(tenant, healthy_name, 10, data)
    # the healthy one brings its own certificate (as cert-manager would write it); a broken one a certificate
    # for another name
    for secret, names in (("own-cert", (SERVER_NAME,)), ("foreign-cert", ("worker.example.com",))):
        data_ = {k: base64.b64encode(v).decode() for k, v in generate(secret, names).as_secret_data().items()}
        core.create_namespaced_secret(tenant, client.V1Secret(metadata=client.V1ObjectMeta(name=secret),
                                                              type="kubernetes.io/tls", data=data_))
    healthy["spec"]["tls"] = {"secretName": "own-cert"}
    create_pipeline(api, healthy, data)

    absurd = broken(tenant, "absurd", lambda d: d["spec"]["stages"][1].update(parallelism=1_000_000))
    with pytest.raises(client.exceptions.ApiException) as refused:
        api.create_namespaced_custom_object(GROUP, VERSION, tenant, PLURAL, absurd)
    assert refused.value.status == 422 and "spec.stages[1].parallelism" in str(refused.value.body)
    assert not api.list_namespaced_custom_object(GROUP, VERSION, tenant, PLURAL,
                                                 field_selector="metadata.name=absurd")["items"]

    names = {case: f"{case}-{uuid.uuid4().hex[:6]}" for case in CASES}
    for case, (edit, _, _) in CASES.items():
        doc = broken(tenant, names[case], edit)
        create_pipeline(api, doc, HOST_ROOT / names[case])
    for case, (_, reason, named) in CASES.items():
        final = finished(api, tenant, names[case])
        print(f"{case}: {final['phase']}, attempt {final.get('lastFailure', {}).get('attempt')}: {final['message']}")
        assert final["phase"] == "Failed", (case, final)
        assert "\n" not in final["message"] and named in final["message"], (case, final["message"])
        conditions = {c["type"]: c for c in final["conditions"]}
        assert conditions["Failed"]["status"] == "True" and conditions["Failed"]["reason"] == reason, case
        assert "\n" not in conditions["Ready"]["message"]
        if reason in ("ExistingOutput", "Rejected"):  # refused, not retried
            assert final["lastFailure"]["attempt"] == 1, final
        if case in ("function", "module", "input"):  # one attempt, its workers never replaced
            created = {e.involved_object.name for e in core.list_namespaced_event(
                tenant, field_selector="reason=Scheduled").items if e.involved_object.name.startswith(names[case])}
            assert len(created) == 1, (case, created)  # workers: 1
            assert not events(core, tenant, names[case], "Recovered"), case
        if case == "existing":  # nothing of the earlier run was touched
            out = HOST_ROOT / names[case] / "out"
            assert sorted(p.name for p in out.iterdir()) == ["step=1", "step=2"]
            assert (out / "step=1" / "part-00000.parquet").read_bytes() == b"earlier run"
        if reason == "RestartBudgetExhausted":  # tried again once (maxRestarts: 1), then given up
            assert final["lastFailure"]["attempt"] == 2, (case, final)
            assert "restart budget spent" in final["message"]
        def posted(name: str = names[case], reason: str = reason, named: str = named) -> bool:
            events = core.list_namespaced_event(tenant, field_selector=f"involvedObject.name={name}").items
            return any(e.reason == reason and named in e.message and "\n" not in e.message for e in events)

        wait_for(f"{case}'s {reason} Event", posted, 30)  # Kopf posts Events from a queue: after the status
        pods = core.list_namespaced_pod(tenant, label_selector=f"ftpipeline.io/pipeline={names[case]}").items
        assert not [p for p in pods if p.metadata.deletion_timestamp is None
                    and p.status.phase in ("Pending", "Running")], f"{case}: pods left running"

    final = finished(api, tenant, healthy_name)
    assert final["phase"] == "Succeeded", final
    assert not core.list_namespaced_secret(tenant, field_selector=f"metadata.name={healthy_name}-worker-tls").items
    [result] = compare(spark, oracle_spec(healthy, data), 10)
    assert result.duplicates == 0 and result.equal, result
    [operator_pod] = core.list_namespaced_pod(installed, label_selector="app.kubernetes.io/component=operator").items
    assert sum(c.restart_count for c in operator_pod.status.container_statuses) == 0


@pytest.fixture(scope="module")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    from ftpipeline.worker.session import build_session

    session = build_session("local[1]", {}, tmp_path_factory.mktemp("oracle-spark"), "ftpipeline-e2e-failures")
    yield session
    session.stop()


def test_the_operator_holds_no_pipeline_storage(kube: client.ApiClient, installed: str) -> None:
    """The operator pod mounts nothing but its own scratch space and the stores' CAs: it never needs a
    pipeline's volumes, nor a store's key."""
    core = client.CoreV1Api(kube)
    [pod] = core.list_namespaced_pod(installed, label_selector="app.kubernetes.io/component=operator").items
    assert {v.name for v in pod.spec.volumes} <= {"tmp", "redis-ca", "zookeeper-ca",
                                                  *{v.name for v in pod.spec.volumes if v.projected}}
    assert all(v.host_path is None and v.persistent_volume_claim is None for v in pod.spec.volumes)
    for v in pod.spec.volumes:
        if v.secret is not None:
            assert [(i.key, i.path) for i in v.secret.items] == [("ca.crt", "ca.crt")], v
