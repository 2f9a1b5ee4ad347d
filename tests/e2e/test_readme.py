"""The README's Kubernetes section, run as written: a test of the documentation, not of a test harness.

The bash blocks of "On Kubernetes" after the image is named are run verbatim
by bash, with only the documented image variables (``IMAGE_REPOSITORY``,
``IMAGE_TAG``) set to the image on the cluster's node. No chown, no extra
operator volumes, no edited example: the unmodified
``examples/clickstream/kubernetes.yaml`` must run to Succeeded through the
worker pod the README deletes, with checkpoints every 5 steps, and its output
(read back through its commits from the chart's object store, with the
pipeline's own keys) must equal the oracle. Another pipeline naming the same
bucket is refused, and the bucket is left as it was.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from ftpipeline.barrier.objects import committed_files
from ftpipeline.objectstore.config import S3Config
from ftpipeline.oracle import compare
from ftpipeline.spec import parse_pipeline

from .conftest import IMAGE, ROOT, example_pipeline

pytestmark = pytest.mark.skipif(shutil.which("helm") is None, reason="no helm on PATH")
GROUP, VERSION, PLURAL = "ftpipeline.io", "v1alpha1", "ftpipelines"
CRD = "ftpipelines.ftpipeline.io"
CHECKPOINT_CRD = "ftpipelinecheckpoints.ftpipeline.io"
PEERING_CRD = "clusterkopfpeerings.kopf.dev"  # the README's install makes both


def section(title: str) -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end > 0 else None]


def bash_blocks(text: str) -> list[str]:
    return re.findall(r"```bash\n(.*?)```", text, flags=re.S)


def test_the_readme_names_the_image_once_and_then_runs_the_example() -> None:
    blocks = bash_blocks(section("On Kubernetes"))
    [naming] = [b for b in blocks if b.lstrip().startswith("export IMAGE_REPOSITORY=")]
    after = blocks[blocks.index(naming) + 1:]
    assert any("helm install" in b for b in after) and any("kubernetes.yaml" in b for b in after)
    assert "localhost/ftpipeline" in naming, "the image the cluster tool builds is the one documented"


def run_bash(script: str, env: dict[str, str], timeout_s: float) -> str:
    out = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=timeout_s)
    print(out.stdout[-4000:], out.stderr[-4000:])
    assert out.returncode == 0, f"the README's commands failed:\n{script}\n{out.stderr[-4000:]}"
    return out.stdout


def _clear(core: client.CoreV1Api, env: dict[str, str]) -> None:
    """The state the README starts from: no release, no namespace of the example, no CRD."""
    subprocess.run(["helm", "uninstall", "ftpipeline", "--namespace", "ftpipeline", "--wait"], env=env,
                   capture_output=True)
    for ns in ("clicks", "ftpipeline"):
        try:
            core.delete_namespace(ns)
        except client.exceptions.ApiException as exc:
            assert exc.status == 404, exc
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and {n.metadata.name for n in core.list_namespace().items} & {"clicks",
                                                                                                     "ftpipeline"}:
        time.sleep(1)
    # earlier tests' pipelines whose operator is gone would hold the CRD's deletion with their finalizer
    api = client.CustomObjectsApi(core.api_client)
    try:
        leftover = api.list_cluster_custom_object(GROUP, VERSION, PLURAL)["items"]
    except client.exceptions.ApiException:
        leftover = []
    for obj in leftover:
        meta = obj["metadata"]
        api.patch_namespaced_custom_object(GROUP, VERSION, meta["namespace"], PLURAL, meta["name"],
                                           {"metadata": {"finalizers": None}})
    out = subprocess.run(["kubectl", "delete", "crd", CRD, CHECKPOINT_CRD, PEERING_CRD, "--ignore-not-found",
                          "--wait", "--timeout=120s"], env=env, capture_output=True, text=True)
    # helm install refuses a CRD it does not own: say here why it is still there, not later in helm's words
    assert out.returncode == 0, f"the CRD {CRD} left by earlier tests could not be deleted: {out.stderr.strip()}"


@pytest.fixture
def readme_env(kube: client.ApiClient) -> Iterator[dict[str, str]]:
    repo, _, tag = IMAGE.rpartition(":")
    env = {**os.environ, "IMAGE_REPOSITORY": repo, "IMAGE_TAG": tag}
    core = client.CoreV1Api(kube)
    _clear(core, env)
    yield env
    _clear(core, env)


def pipeline_store(core: client.CoreV1Api, namespace: str, name: str) -> S3Config:
    """The chart's object store as this machine reaches it (its Service's address: the node is this machine),
    with the keys the operator gave the pipeline."""
    import base64

    keys = {k: base64.b64decode(v).decode()
            for k, v in (core.read_namespaced_secret(f"{name}-object-store", namespace).data or {}).items()}
    service = core.read_namespaced_service("ftpipeline-object-store", "ftpipeline")
    return S3Config(endpoint=f"http://{service.spec.cluster_ip}:7070", access_key=keys["AWS_ACCESS_KEY_ID"],
                    secret_key=keys["AWS_SECRET_ACCESS_KEY"], region=keys.get("AWS_REGION", "us-east-1"))


def released_steps(doc: dict[str, Any], store: S3Config) -> dict[int, list[str]]:
    [sink] = [s["sink"]["parquet"]["path"] for s in doc["spec"]["stages"] if "sink" in s]
    return committed_files(sink, config=store)


def another_pipeline_cannot_take_the_bucket(api: client.CustomObjectsApi, core: client.CoreV1Api,
                                            doc: dict[str, Any], store: S3Config,
                                            released: dict[int, list[str]]) -> None:
    """A second pipeline whose sink names the first one's bucket is Rejected, naming the field, before any pod
    of it starts; the bucket keeps exactly what it held."""
    intruder = yaml.safe_load(yaml.safe_dump(doc))
    intruder["metadata"] = {"name": "intruder"}
    intruder["spec"]["checkpoint"]["storage"]["path"] = "s3://intruder/checkpoints"
    intruder["spec"]["deadLetter"]["path"] = "s3://intruder/dead-letter"
    api.create_namespaced_custom_object(GROUP, VERSION, "clicks", PLURAL, intruder)
    deadline = time.monotonic() + 120
    status: dict[str, Any] = {}
    while time.monotonic() < deadline and status.get("phase") != "Failed":
        time.sleep(1)
        status = api.get_namespaced_custom_object(GROUP, VERSION, "clicks", PLURAL, "intruder").get("status") or {}
    assert status.get("phase") == "Failed", status
    message = status["lastFailure"]["message"]
    assert "sink.parquet.path: bucket 'clickstream' belongs to another pipeline" in message, status
    assert not core.list_namespaced_pod("clicks", label_selector="ftpipeline.io/pipeline=intruder").items
    assert released_steps(doc, store) == released


def test_the_readme_kubernetes_commands_run_the_example_through_a_deleted_worker(
        kube: client.ApiClient, readme_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = bash_blocks(section("On Kubernetes"))
    [naming] = [b for b in blocks if b.lstrip().startswith("export IMAGE_REPOSITORY=")]
    run_block, cleanup = blocks[blocks.index(naming) + 1:][:2]
    assert "kubectl delete pod" in run_block and "helm uninstall" in cleanup
    started = time.monotonic()
    run_bash(run_block, readme_env, timeout_s=1500)
    print(f"the README's commands took {time.monotonic() - started:.0f} s")

    api = client.CustomObjectsApi(kube)
    core = client.CoreV1Api(kube)
    final: dict[str, Any] = api.get_namespaced_custom_object(GROUP, VERSION, "clicks", PLURAL, "clickstream")["status"]
    doc = example_pipeline("kubernetes.yaml")  # the one the README applies: on the chart's object store
    steps = doc["spec"]["steps"]["maxSteps"]
    assert final["phase"] == "Succeeded" and final["committedStep"] == steps, final
    assert final["recoveries"] >= 1 and final["lastRecovery"]["worker"] == "w1", final
    events = core.list_namespaced_event("clicks", field_selector="involvedObject.name=clickstream").items
    # "recovered on the survivors", as the README says: the lost work re-run on the survivors (lineage), or a
    # rollback to a checkpoint they reopen, never a rollback to nothing when lineage could recover
    recovered = [e.message for e in events if e.reason == "Recovered"][-1]
    assert recovered.startswith(f"{final['lastRecovery']['strategy']} recovery of worker w1"), recovered
    assert re.search(r"on [12] survivors?", recovered) and "very beginning" not in recovered, recovered
    if "the checkpoint at step" not in recovered:
        assert final["lastRecovery"]["strategy"] == "lineage", (final, recovered)
    checkpoints = [e for e in events if e.reason == "Checkpointed"]
    assert len(checkpoints) >= steps // doc["spec"]["checkpoint"]["intervalSteps"] - 1, [e.message for e in events]
    [operator] = core.list_namespaced_pod("ftpipeline", label_selector="app.kubernetes.io/component=operator").items
    assert all(v.host_path is None and v.persistent_volume_claim is None for v in operator.spec.volumes)

    # the output, read as the README says (the files the commits name), from here: the Service's address, the
    # pipeline's own keys
    store = pipeline_store(core, "clicks", "clickstream")
    for name, value in store.to_env().items():
        monkeypatch.setenv(name, value)
    released = released_steps(doc, store)
    local = yaml.safe_load(yaml.safe_dump(doc))
    local["spec"]["entryPoint"] = str(ROOT / "examples" / "clickstream" / "clickstream.py")
    from ftpipeline.worker.session import build_session

    spark = build_session("local[1]", {}, tmp_path / "oracle", "ftpipeline-e2e-readme")
    try:
        [result] = compare(spark, parse_pipeline(yaml.safe_dump(local), ROOT, check_entry_point=True), steps)
    finally:
        spark.stop()
    print(f"README run: {final['recoveries']} recoveries, last {final['lastRecovery']}; {result}")
    assert result.duplicates == 0, result
    assert result.equal, result
    another_pipeline_cannot_take_the_bucket(api, core, doc, store, released)

    run_bash(cleanup, readme_env, timeout_s=600)
    assert not [n for n in core.list_namespace().items if n.metadata.name == "clicks"]
