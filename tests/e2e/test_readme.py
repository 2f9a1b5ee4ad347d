"""The README's Kubernetes section, run as written: a test of the documentation, not of a test harness.

The bash blocks of "On Kubernetes" after the image is named are run verbatim
by bash, with only the documented image variables (``IMAGE_REPOSITORY``,
``IMAGE_TAG``) set to the image on the cluster's node. No chown, no extra
operator volumes, no edited example: the unmodified
``examples/clickstream/kubernetes.yaml`` must run to Succeeded through the
worker pod the README deletes, with checkpoints every 5 steps, and its output
(read back from the claim's directory on the node) must equal the oracle.
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


def claim_directory(core: client.CoreV1Api, namespace: str, claim: str) -> Path:
    """Where the claim's volume lives on the node (local-path: a directory; the node is this machine)."""
    pvc = core.read_namespaced_persistent_volume_claim(claim, namespace)
    pv = core.read_persistent_volume(pvc.spec.volume_name)
    source = pv.spec.host_path or pv.spec.local
    assert source is not None, f"volume {pv.metadata.name} is not a node directory: cannot read it back here"
    return Path(source.path)


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


def test_the_readme_kubernetes_commands_run_the_example_through_a_deleted_worker(
        kube: client.ApiClient, readme_env: dict[str, str], tmp_path: Path) -> None:
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
    doc = example_pipeline()
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

    data = claim_directory(core, "clicks", "clickstream-data")
    local = yaml.safe_load(yaml.safe_dump(doc))
    local["spec"]["entryPoint"] = str(ROOT / "examples" / "clickstream" / "clickstream.py")
    for stage in local["spec"]["stages"]:
        if "sink" in stage:
            relative = Path(stage["sink"]["parquet"]["path"]).relative_to("/data")
            stage["sink"]["parquet"]["path"] = str(data / relative)
    from ftpipeline.worker.session import build_session

    spark = build_session("local[1]", {}, tmp_path / "oracle", "ftpipeline-e2e-readme")
    try:
        [result] = compare(spark, parse_pipeline(yaml.safe_dump(local), ROOT, check_entry_point=True), steps)
    finally:
        spark.stop()
    print(f"README run: {final['recoveries']} recoveries, last {final['lastRecovery']}; {result}")
    assert result.duplicates == 0, result
    assert result.equal, result

    run_bash(cleanup, readme_env, timeout_s=600)
    assert not [n for n in core.list_namespace().items if n.metadata.name == "clicks"]
