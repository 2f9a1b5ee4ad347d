"""The operator's policy on what a pipeline may put into its pods, and the webhook's verdict on an object."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from ftpipeline_operator.admission import review, service_names
from ftpipeline_operator.policy import DEFAULT_VOLUME_TYPES, Policy, problems

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def doc() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((ROOT / "examples" / "clickstream" / "pipeline.yaml").read_text())
    return loaded


def test_the_default_policy_refuses_host_paths_and_any_service_account_naming_the_field() -> None:
    spec = {"volumes": [{"name": "ok", "persistentVolumeClaim": {"claimName": "c"}},
                        {"name": "node", "hostPath": {"path": "/"}}],
            "serviceAccountName": "admin"}
    found = {p.path: p.message for p in problems(spec, Policy())}
    assert set(found) == {"spec.volumes[1].hostPath", "spec.serviceAccountName"}
    assert "hostPath is not allowed" in found["spec.volumes[1].hostPath"]
    assert "'admin' is not allowed" in found["spec.serviceAccountName"]


def test_secrets_and_projected_volumes_are_refused_by_default_since_user_code_reads_them() -> None:
    spec = {"volumes": [{"name": "s", "secret": {"secretName": "db"}}, {"name": "p", "projected": {"sources": []}}]}
    assert [p.path for p in problems(spec, Policy())] == ["spec.volumes[0].secret", "spec.volumes[1].projected"]


def test_what_the_chart_lists_is_allowed() -> None:
    policy = Policy.from_env({"FTPIPELINE_ALLOWED_VOLUME_TYPES": "hostPath, emptyDir",
                              "FTPIPELINE_ALLOWED_SERVICE_ACCOUNTS": "pipelines"})
    spec = {"volumes": [{"name": "node", "hostPath": {"path": "/data"}}], "serviceAccountName": "pipelines"}
    assert problems(spec, policy) == []
    assert [p.path for p in problems({"serviceAccountName": "other"}, policy)] == ["spec.serviceAccountName"]


def test_an_unset_variable_keeps_the_default_and_an_empty_one_allows_nothing() -> None:
    assert Policy.from_env({}).volume_types == frozenset(DEFAULT_VOLUME_TYPES)
    assert Policy.from_env({"FTPIPELINE_ALLOWED_VOLUME_TYPES": ""}).volume_types == frozenset()


def test_the_webhook_refuses_a_cycle_naming_the_stage(doc: dict[str, Any]) -> None:
    names = [s["name"] for s in doc["spec"]["stages"]]
    doc["spec"]["stages"][1]["inputs"] = [{"stage": names[2]}]  # clean <- per-user <- clean
    found = review(doc, None, Policy())
    assert any(p.path.startswith("spec.stages[") and "cycle" in p.message for p in found), found


def test_the_webhook_refuses_schema_and_policy_problems_together(doc: dict[str, Any]) -> None:
    doc["spec"]["volumes"] = [{"name": "node", "hostPath": {"path": "/"}}]
    doc["spec"]["workers"] = 0
    paths = {p.path for p in review(doc, None, Policy())}
    assert "spec.workers" in paths
    doc["spec"]["workers"] = 2
    assert {p.path for p in review(doc, None, Policy())} == {"spec.volumes[0].hostPath"}


def test_an_update_that_keeps_the_spec_passes_even_if_the_policy_tightened(doc: dict[str, Any]) -> None:
    doc["spec"]["volumes"] = [{"name": "node", "hostPath": {"path": "/"}}]
    newer = copy.deepcopy(doc)
    newer["metadata"]["finalizers"] = ["ftpipeline.io/cleanup"]
    assert review(newer, doc, Policy()) == []
    newer["spec"]["workers"] += 1
    assert [p.path for p in review(newer, doc, Policy())] == ["spec.volumes[0].hostPath"]


def test_a_valid_document_passes(doc: dict[str, Any]) -> None:
    assert review(doc, None, Policy()) == []


def test_the_certificate_names_the_service() -> None:
    assert service_names("ftp-ftpipeline.ops")[0] == "ftp-ftpipeline.ops.svc"


def test_an_unknown_volume_type_is_named_with_the_nearest_one() -> None:
    found = problems({"volumes": [{"name": "data", "hostpath": {"path": "/x"}},
                                  {"name": "out", "persistentVolumeClam": {"claimName": "c"}}]}, Policy())
    assert [(p.path, p.message) for p in found] == [
        ("spec.volumes[0].hostpath", "unknown volume type 'hostpath' (did you mean hostPath?)"),
        ("spec.volumes[1].persistentVolumeClam",
         "unknown volume type 'persistentVolumeClam' (did you mean persistentVolumeClaim?)")]
