"""A finished pipeline stays finished: an operator restart or a ``helm upgrade`` runs none of them again.

The operator keeps no memory of its own: a new one (a restarted pod, an
upgrade's new ReplicaSet, a standby taking over) learns each pipeline from
its object. A pipeline that Succeeded, or Failed with its restart budget
spent, must not start pods again, count another attempt or change its
status, until its spec changes (as Flink's Kubernetes operator never
redeploys a finished job). Checked here on both kinds, through a deleted
operator pod and then a ``helm upgrade`` that rolls the operator.
"""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from typing import Any

import pytest
from kubernetes import client

from .test_operator import (GROUP, HOST_ROOT, PLURAL, ROOT, VERSION, _writable_dir, create_pipeline, events, finished,
                            operator, pipeline, status, wait_for)  # noqa: F401 (operator: a fixture)
from .test_operator_failures import broken, unwritable

pytestmark = pytest.mark.skipif(not os.environ.get("KUBECONFIG"), reason="no cluster")
SELECTOR = "app.kubernetes.io/component=operator"
QUIET_S = 20  # how long nothing may move after the new operator has seen both pipelines
SEEN = "the pipeline ended before this operator started"


def _operator_pod(core: client.CoreV1Api, namespace: str, not_named: set[str]) -> str:
    """The name of the operator pod that is Running and ready and none of ``not_named``."""
    def ready() -> str | None:
        for pod in core.list_namespaced_pod(namespace, label_selector=SELECTOR).items:
            statuses = pod.status.container_statuses or []
            if pod.metadata.name not in not_named and pod.metadata.deletion_timestamp is None and statuses \
                    and all(c.ready for c in statuses):
                return str(pod.metadata.name)
        return None
    return str(wait_for("a new operator pod ready", ready, 300))


def _pods(core: client.CoreV1Api, namespace: str, name: str) -> list[str]:
    return [p.metadata.name for p in
            core.list_namespaced_pod(namespace, label_selector=f"ftpipeline.io/pipeline={name}").items]


def _status(api: client.CustomObjectsApi, namespace: str, name: str) -> dict[str, Any]:
    """The pipeline's status as the operator wrote it (Kopf's own bookkeeping aside)."""
    return {k: v for k, v in status(api, namespace, name).items() if k != "kopf"}


def _posted(core: client.CoreV1Api, namespace: str, name: str) -> int:
    """How many Events the operator posted about ``name`` (Kopf's handler log lines aside)."""
    return len([e for e in core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}").items
                if e.reason != "Logging"])


def _still_as_they_ended(api: client.CustomObjectsApi, core: client.CoreV1Api, namespace: str,
                         ended: dict[str, dict[str, Any]], posted: dict[str, int], operator: str) -> None:
    """The new operator saw each pipeline (its log says so), then for QUIET_S: no pod, no status change, no
    Event, no attempt counted."""
    def seen() -> bool:
        log = core.read_namespaced_pod_log(operator, namespace, container="operator")
        return all(any(SEEN in line and name in line for line in log.splitlines()) for name in ended)

    wait_for(f"operator {operator} to see the finished pipelines", seen, 120)
    until = time.monotonic() + QUIET_S
    while time.monotonic() < until:
        for name, was in ended.items():
            assert _pods(core, namespace, name) == [], f"{name}: pods created after {operator} started"
            now = _status(api, namespace, name)
            assert now == was, f"{name}: status changed under {operator}: {was} -> {now}"
            assert _posted(core, namespace, name) == posted[name], f"{name}: Events posted under {operator}"
        time.sleep(1)


def test_finished_pipelines_stay_finished_across_an_operator_restart_and_a_helm_upgrade(
        kube: client.ApiClient, namespace: str, operator: str) -> None:
    api = client.CustomObjectsApi(kube)
    core = client.CoreV1Api(kube)
    done = f"done-{uuid.uuid4().hex[:6]}"
    data = _writable_dir(HOST_ROOT / done)
    create_pipeline(api, pipeline(namespace, done, 4, data), data)
    failed = f"spent-{uuid.uuid4().hex[:6]}"  # the workers cannot write: attempts fail until the budget is spent
    create_pipeline(api, broken(namespace, failed, unwritable), _writable_dir(HOST_ROOT / failed))
    ended = {done: finished(api, namespace, done), failed: finished(api, namespace, failed)}
    assert ended[done]["phase"] == "Succeeded" and ended[failed]["phase"] == "Failed", ended
    assert "restart budget spent" in ended[failed]["message"]
    for name in ended:  # the finished runs' pods go, and their Events are all posted (Kopf queues them)
        wait_for(f"{name}'s pods to go", lambda name=name: not _pods(core, namespace, name), 120)
    wait_for("the Succeeded Event", lambda: events(core, namespace, done, "Succeeded"), 30)
    wait_for("the RestartBudgetExhausted Event",
             lambda: events(core, namespace, failed, "RestartBudgetExhausted"), 30)
    time.sleep(3)
    ended = {name: _status(api, namespace, name) for name in ended}
    conditions = {c["type"]: c["status"] for c in ended[done]["conditions"]}
    assert conditions["Ready"] == "False" and conditions["Degraded"] == "False" and conditions["Failed"] == "False"
    assert ended[done]["workers"]["ready"] == 0, ended[done]
    posted = {name: _posted(core, namespace, name) for name in ended}

    [first] = [p.metadata.name for p in core.list_namespaced_pod(namespace, label_selector=SELECTOR).items]
    core.delete_namespaced_pod(first, namespace)
    second = _operator_pod(core, namespace, {first})
    _still_as_they_ended(api, core, namespace, ended, posted, second)

    upgraded = subprocess.run(
        ["helm", "upgrade", operator, str(ROOT / "charts" / "ftpipeline"), "--namespace", namespace, "--reuse-values",
         "--set", "operator.extraEnv[0].name=FTPIPELINE_UPGRADED,operator.extraEnv[0].value=yes",
         "--wait", "--timeout", "5m"], capture_output=True, text=True)
    assert upgraded.returncode == 0, upgraded.stderr
    third = _operator_pod(core, namespace, {first, second})
    _still_as_they_ended(api, core, namespace, ended, posted, third)
    for name in ended:
        api.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)


def _helm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["helm", *args], capture_output=True, text=True)


def _roles(rbac: client.RbacAuthorizationV1Api, namespace: str) -> list[str]:
    return [r.metadata.name for r in rbac.list_namespaced_role(namespace).items
            if (r.metadata.labels or {}).get("app.kubernetes.io/managed-by") == "Helm"]


def _watched(apps: client.AppsV1Api, namespace: str) -> list[str]:
    [deployment] = apps.list_namespaced_deployment(namespace,
                                                   label_selector="app.kubernetes.io/component=operator").items
    [operator] = [c for c in deployment.spec.template.spec.containers if c.name == "operator"]
    return sorted(a.split("=", 1)[1] for a in operator.command if a.startswith("--namespace="))


def test_helm_installs_and_upgrades_with_a_watched_namespace_missing_and_uninstall_leaves_only_the_users_objects(
        kube: client.ApiClient, namespace: str, crd: str) -> None:
    """A watched namespace that does not exist (never made, or deleted since) fails neither the install nor an
    upgrade: the others get their Role and watch, and the release's notes name the missing one; created later,
    it is taken in by the next upgrade. ``helm uninstall`` takes what the chart and the operator made in the
    release namespace, and leaves what the user made there."""
    from .test_operator import _install, new_namespace

    core, rbac, apps = client.CoreV1Api(kube), client.RbacAuthorizationV1Api(kube), client.AppsV1Api(kube)
    tenant = new_namespace(kube, "tenant")
    missing = f"later-{uuid.uuid4().hex[:6]}"
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "mine"}, "data": {"a": "b"}})
    release = _install(namespace, "--set", f"watchNamespaces={{{namespace},{tenant},{missing}}}")
    notes = _helm("get", "notes", release, "--namespace", namespace).stdout
    assert f"do not exist: {missing}." in notes, notes
    assert _roles(rbac, tenant) and _watched(apps, namespace) == sorted([namespace, tenant])

    core.delete_namespace(tenant)  # deleted since: the upgrade that used to fail on it
    wait_for(f"namespace {tenant} to go", lambda: tenant not in {n.metadata.name for n in core.list_namespace().items},
             120)
    upgraded = _helm("upgrade", release, str(ROOT / "charts" / "ftpipeline"), "--namespace", namespace,
                     "--reuse-values", "--wait", "--timeout", "5m")
    assert upgraded.returncode == 0, upgraded.stderr
    assert f"do not exist: {tenant}, {missing}." in upgraded.stdout, upgraded.stdout
    assert _watched(apps, namespace) == [namespace]

    core.create_namespace({"metadata": {"name": missing}})
    try:
        upgraded = _helm("upgrade", release, str(ROOT / "charts" / "ftpipeline"), "--namespace", namespace,
                         "--reuse-values", "--wait", "--timeout", "5m")
        assert upgraded.returncode == 0, upgraded.stderr
        assert _roles(rbac, missing) and _watched(apps, namespace) == sorted([namespace, missing])
        assert f"do not exist: {tenant}." in upgraded.stdout, upgraded.stdout  # the one deleted, alone

        removed = _helm("uninstall", release, "--namespace", namespace, "--wait", "--timeout", "5m")
        assert removed.returncode == 0, removed.stderr
        wait_for("the release's pods to go", lambda: not core.list_namespaced_pod(namespace).items, 180)
        left = {
            "configmaps": sorted(c.metadata.name for c in core.list_namespaced_config_map(namespace).items
                                 if c.metadata.name != "kube-root-ca.crt"),
            "secrets": sorted(s.metadata.name for s in core.list_namespaced_secret(namespace).items),
            "services": sorted(s.metadata.name for s in core.list_namespaced_service(namespace).items),
            "deployments": sorted(d.metadata.name for d in apps.list_namespaced_deployment(namespace).items),
            "statefulsets": sorted(s.metadata.name for s in apps.list_namespaced_stateful_set(namespace).items),
            "roles": _roles(rbac, namespace) + _roles(rbac, missing),
            "claims": sorted(c.metadata.name for c in
                             core.list_namespaced_persistent_volume_claim(namespace).items),
        }
        print(f"left in {namespace} after helm uninstall: {left}")
        assert left == {"configmaps": ["mine"], "secrets": [], "services": [], "deployments": [],
                        "statefulsets": [], "roles": [], "claims": left["claims"]}, left
    finally:
        core.delete_namespace(missing)
