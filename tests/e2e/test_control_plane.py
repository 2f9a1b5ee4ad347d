"""The chart's shared Redis and ZooKeeper under two tenants, each deleted mid-run.

One operator, one in-chart Redis and one in-chart ZooKeeper serve the whole
cluster, as the chart installs them. Two FTPipelines with the same name
(``clickstream``) run at once in two namespaces; their state is kept apart by
namespace, name and uid (``render.identity``). Neither has ``maxSteps`` at
first (the generator never ends), so neither can end before the outages however
fast its steps run. While both run:

1. Redis is stopped (its Deployment scaled to none) until both pipelines
   reported it unreachable, then started again on the same claim
   (append-only file): both pause and go on;
2. the ZooKeeper pod is deleted: the same, for the command log; then, with
   the first pipeline's own Redis user (from its ``<name>-store`` Secret),
   every read, write and delete of the second's keys is refused by Redis,
   as are the administrative commands, and the second's keys are unchanged;
   and no credential shows in status, Events, logs, ``kubectl describe`` or
   metrics;
3. the first is suspended (``spec.suspend``) and resumed with ``maxSteps``
   two steps past where it stopped; it finishes and is deleted while the
   other runs: its finalizer must clear only its own keys and znodes, and the
   other must go on committing steps;
4. the other is then ended the same way.

Both must end Succeeded with no worker declared lost (an outage is not a
death), with Unavailable/Recovered Events for each outage (from whichever
coordinator met it), not paused at the end, and with output equal to the
oracle. Had the finalizer removed the other pipeline's lineage or command log, that one would have rebuilt or
started over, and its resume would miss or repeat steps (or, as a fresh run
over a sink that holds output, end Failed).
"""

from __future__ import annotations

import base64
import itertools
import os
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import redis
from kubernetes import client

from ftpipeline.control import access
from ftpipeline.oracle import compare
from ftpipeline_operator import render

from .test_operator import (GROUP, HOST_ROOT, PLURAL, VERSION, _writable_dir, create_pipeline, deleted, finished,
                            new_namespace, oracle_spec, pipeline, status, wait_for)
from .test_operator_failures import installed, spark  # noqa: F401  (fixtures: the chart in its namespace; the oracle)

pytestmark = pytest.mark.skipif(not os.environ.get("KUBECONFIG"), reason="no cluster")

NAME = "clickstream"


@pytest.fixture
def tenants(kube: client.ApiClient) -> Iterator[tuple[str, str]]:
    names = (new_namespace(kube, "team-a"), new_namespace(kube, "team-b"))
    yield names
    for name in names:
        client.CoreV1Api(kube).delete_namespace(name, grace_period_seconds=0)


def _committed(api: client.CustomObjectsApi, tenant: str) -> int:
    return int(status(api, tenant, NAME).get("committedStep") or 0)


def _delete_pod_and_go_on(core: client.CoreV1Api, api: client.CustomObjectsApi, operator_ns: str, component: str,
                          tenants: tuple[str, str]) -> None:
    """Delete the component's pod; wait until its replacement is ready and both pipelines committed two more
    steps."""
    [old] = core.list_namespaced_pod(operator_ns, label_selector=f"app.kubernetes.io/component={component}").items
    before = {t: _committed(api, t) for t in tenants}
    core.delete_namespaced_pod(old.metadata.name, operator_ns)
    started = time.monotonic()

    def replaced() -> bool:
        pods = core.list_namespaced_pod(operator_ns, label_selector=f"app.kubernetes.io/component={component}").items
        return any(p.metadata.name != old.metadata.name and any(c.type == "Ready" and c.status == "True"
                                                                for c in p.status.conditions or []) for p in pods)

    wait_for(f"a new {component} pod", replaced, 180)
    for t in tenants:
        wait_for(f"{t}/{NAME} to commit after the {component} pod was deleted",
                 lambda t=t: _committed(api, t) >= before[t] + 2, 300)
    print(f"{component} pod {old.metadata.name} deleted at steps {before}; both went on "
          f"({ {t: _committed(api, t) for t in tenants} } {time.monotonic() - started:.0f} s later)")


def _stop_redis_until_both_notice(kube: client.ApiClient, api: client.CustomObjectsApi, operator_ns: str,
                                  tenants: tuple[str, str]) -> None:
    """Scale the chart's Redis to none until each pipeline reported it unreachable, then back to one; wait until
    both committed two more steps. (A deleted pod's replacement can be serving within a second or two, and a
    coordinator with no call in flight meanwhile then never meets the outage: this one lasts until both did.)"""
    apps, core = client.AppsV1Api(kube), client.CoreV1Api(kube)
    selector = "app.kubernetes.io/component=redis"
    [deployment] = apps.list_namespaced_deployment(operator_ns, label_selector=selector).items
    name = deployment.metadata.name
    before = {t: _committed(api, t) for t in tenants}
    apps.patch_namespaced_deployment_scale(name, operator_ns, {"spec": {"replicas": 0}})
    started = time.monotonic()
    wait_for("the Redis pod gone", lambda: not core.list_namespaced_pod(operator_ns, label_selector=selector).items,
             120)
    for t in tenants:
        wait_for(f"{t}/{NAME} to report Redis unreachable", lambda t=t: "RedisUnavailable" in _events(core, t), 120)
    paused = {t: _committed(api, t) for t in tenants}
    apps.patch_namespaced_deployment_scale(name, operator_ns, {"spec": {"replicas": 1}})
    for t in tenants:
        wait_for(f"{t}/{NAME} to report Redis back", lambda t=t: "RedisRecovered" in _events(core, t), 180)
        wait_for(f"{t}/{NAME} to commit after Redis came back", lambda t=t: _committed(api, t) >= paused[t] + 2, 300)
    print(f"Redis stopped at steps {before}, paused at {paused}; both went on "
          f"({ {t: _committed(api, t) for t in tenants} } {time.monotonic() - started:.0f} s later)")


def _patch_spec(api: client.CustomObjectsApi, tenant: str, spec: dict[str, Any]) -> None:
    api.patch_namespaced_custom_object(GROUP, VERSION, tenant, PLURAL, NAME, {"spec": spec})


def _suspend_then_end(api: client.CustomObjectsApi, tenant: str, doc: dict[str, Any]) -> int:
    """Suspend the endless pipeline, then resume it with an end two steps past where it stopped."""
    _patch_spec(api, tenant, {"suspend": True})
    wait_for(f"{tenant}/{NAME} to be suspended", lambda: status(api, tenant, NAME).get("phase") == "Suspended", 180)
    steps = _committed(api, tenant) + 2
    _patch_spec(api, tenant, {"suspend": False, "steps": {"maxSteps": steps}})
    doc["spec"]["steps"]["maxSteps"] = steps
    return steps


def _events(core: client.CoreV1Api, tenant: str) -> set[str]:
    return {e.reason for e in core.list_namespaced_event(tenant, field_selector=f"involvedObject.name={NAME}").items}


def _secret(core: client.CoreV1Api, namespace: str, name: str, key: str) -> str:
    return base64.b64decode(core.read_namespaced_secret(name, namespace).data[key]).decode()


def _chart_redis(core: client.CoreV1Api, operator_ns: str, url: str) -> redis.Redis:
    """A client of the chart's Redis from this machine, with the credentials ``url`` carries: its host
    (the Service's DNS name, which only pods resolve) replaced by the Service's cluster IP, over TLS
    trusting the chart's Redis CA (by address, so the name is not checked here: the sidecars check it)."""
    ip = core.read_namespaced_service("ftp-ftpipeline-redis", operator_ns).spec.cluster_ip
    ca = Path(tempfile.mkdtemp()) / "ca.crt"
    ca.write_text(_secret(core, operator_ns, "ftp-ftpipeline-redis-tls", "ca.crt"))
    credentials = urlsplit(url).netloc.rpartition("@")[0]
    return redis.Redis.from_url(f"rediss://{credentials}@{ip}:6379/0", socket_timeout=10, ssl_ca_certs=str(ca),
                                ssl_check_hostname=False)


def _one_pipeline_cannot_touch_the_others_redis_keys(core: client.CoreV1Api, api: client.CustomObjectsApi,
                                                     operator_ns: str, tenants: tuple[str, str]) -> None:
    mine, theirs = tenants
    as_mine = _chart_redis(core, operator_ns, _secret(core, mine, f"{NAME}-store", render.STORE_REDIS_KEY))
    admin = _chart_redis(core, operator_ns, access.with_credentials(
        "redis://r:6379/0", "", _secret(core, operator_ns, "ftp-ftpipeline-redis-auth", "password")))
    their_key = render.identity(api.get_namespaced_custom_object(GROUP, VERSION, theirs, PLURAL, NAME))
    their_keys = list(itertools.islice(admin.scan_iter(match=f"ftp:{{{their_key}}}:*", count=1000), 20))
    assert their_keys, f"no keys of {theirs}/{NAME} under ftp:{{{their_key}}}:"
    canary = f"ftp:{{{their_key}}}:canary"
    admin.set(canary, b"theirs")
    for key in [canary, *their_keys]:
        for attempt in (as_mine.get, as_mine.delete, lambda k: as_mine.set(k, b"mine"), as_mine.dump):
            with pytest.raises(redis.exceptions.NoPermissionError):
                attempt(key)
    for admin_only in (as_mine.flushall, lambda: as_mine.keys("*"), as_mine.acl_list, lambda: as_mine.config_get("*")):
        with pytest.raises(redis.exceptions.NoPermissionError):
            admin_only()
    with pytest.raises((redis.exceptions.AuthenticationError, redis.exceptions.ResponseError)):
        _chart_redis(core, operator_ns, "redis://r:6379/0").get(canary)
    assert admin.get(canary) == b"theirs", "their key is as it was"
    admin.delete(canary)
    my_key = render.identity(api.get_namespaced_custom_object(GROUP, VERSION, mine, PLURAL, NAME))
    assert as_mine.exists(f"ftp:{{{my_key}}}:canary") == 0, "its own keys it reaches"


def _shown(core: client.CoreV1Api, operator_ns: str, tenants: tuple[str, str]) -> dict[str, str]:
    """Everything a user of the cluster is shown about the pipelines, by where it was shown."""
    env = dict(os.environ)
    out: dict[str, str] = {}
    for ns in (operator_ns, *tenants):
        for what in ("ftpipelines", "pods", "deployments", "services", "configmaps"):
            out[f"describe {what} -n {ns}"] = subprocess.run(["kubectl", "describe", what, "-n", ns], env=env,
                                                             capture_output=True, text=True).stdout
        out[f"get ftpipelines -n {ns} -o yaml"] = subprocess.run(
            ["kubectl", "get", "ftpipelines", "-n", ns, "-o", "yaml"], env=env, capture_output=True, text=True).stdout
        out[f"events -n {ns}"] = "\n".join(f"{e.reason}: {e.message}" for e in core.list_namespaced_event(ns).items)
        for pod in core.list_namespaced_pod(ns).items:
            for c in pod.spec.containers:
                out[f"logs {ns}/{pod.metadata.name}/{c.name}"] = core.read_namespaced_pod_log(
                    pod.metadata.name, ns, container=c.name, tail_lines=5000)
            port = (pod.metadata.annotations or {}).get("prometheus.io/port")
            if port and pod.status.pod_ip:
                with urllib.request.urlopen(f"http://{pod.status.pod_ip}:{port}/metrics", timeout=10) as r:
                    out[f"metrics {ns}/{pod.metadata.name}"] = r.read().decode()
    return out


def _no_credential_is_shown(core: client.CoreV1Api, operator_ns: str, tenants: tuple[str, str]) -> None:
    credentials = {f"{store} admin": _secret(core, operator_ns, f"ftp-ftpipeline-{store}-auth", "password")
                   for store in ("redis", "zookeeper")}
    for tenant in tenants:
        for key in ("redis-password", "zookeeper-password"):
            credentials[f"{tenant} {key}"] = _secret(core, tenant, f"{NAME}-store", key)
        key_pem = _secret(core, tenant, f"{NAME}-worker-tls", "tls.key")
        credentials[f"{tenant} worker key"] = "".join(key_pem.splitlines()[1:-1])[:40]
    shown = _shown(core, operator_ns, tenants)
    assert any(k.startswith("logs") for k in shown) and any(k.startswith("metrics") for k in shown), list(shown)
    leaks = [(what, where) for what, value in credentials.items() for where, text in shown.items()
             if value and value in text]
    assert not leaks, leaks


def test_two_same_named_pipelines_outlive_the_shared_redis_and_zookeeper_and_each_other(
        kube: client.ApiClient, installed: str, tenants: tuple[str, str], spark: object) -> None:
    api = client.CustomObjectsApi(kube)
    core = client.CoreV1Api(kube)
    docs: dict[str, dict[str, Any]] = {}
    data: dict[str, Path] = {}
    for tenant in tenants:
        data[tenant] = _writable_dir(HOST_ROOT / f"{tenant}-{NAME}")
        docs[tenant] = pipeline(tenant, NAME, 1, data[tenant])
    short, long = tenants
    for tenant in tenants:  # neither may end during the outages, however fast its steps run
        spec = docs[tenant]["spec"]
        del spec["steps"]["maxSteps"]
        # paced (a step 200 ms after the last, records or not) and small: endless runs are compared with the
        # oracle whole at the end, thousands of steps of 6,000 rows unpaced
        spec["steps"]["trigger"] = {"records": 1_000_000_000, "timerMs": 200}
        for stage in spec["stages"]:
            if "source" in stage:
                stage["source"]["generator"]["rowsPerStep"] = 1000
    for tenant in tenants:
        create_pipeline(api, docs[tenant], data[tenant])
    for t in tenants:
        wait_for(f"{t}/{NAME} to commit step 2", lambda t=t: _committed(api, t) >= 2, 300)

    _stop_redis_until_both_notice(kube, api, installed, tenants)
    _delete_pod_and_go_on(core, api, installed, "zookeeper", tenants)
    # each runs as its own Redis user (kept across the Redis restart above), which cannot reach the other's keys
    _one_pipeline_cannot_touch_the_others_redis_keys(core, api, installed, tenants)
    _no_credential_is_shown(core, installed, tenants)

    # now the first is given an end, two steps past where it is suspended
    short_steps = _suspend_then_end(api, short, docs[short])
    t0 = time.monotonic()
    first = finished(api, short, NAME)
    print(f"{short} finished {time.monotonic() - t0:.0f} s after the outages; {long} at step {_committed(api, long)}")
    assert first["phase"] == "Succeeded", first
    # each outage was seen and reported (by whichever coordinator called the server while it was gone: one whose
    # workers happen to hold no call to it then goes through it unaware, which is no fault)
    outage_events = {"RedisUnavailable", "RedisRecovered", "ZooKeeperUnavailable", "ZooKeeperRecovered"}
    seen = _events(core, short) | _events(core, long)
    assert outage_events <= seen, seen
    api.delete_namespaced_custom_object(GROUP, VERSION, short, PLURAL, NAME)
    t0 = time.monotonic()
    wait_for(f"{short}/{NAME} to be deleted (its finalizer done)", lambda: deleted(api, short, NAME), 120)
    at_gone = _committed(api, long)
    print(f"{short} deleted in {time.monotonic() - t0:.0f} s; {long} at step {at_gone}")
    wait_for(f"{long}/{NAME} to go on after the other was deleted", lambda: _committed(api, long) >= at_gone + 2, 300)
    assert status(api, long, NAME)["phase"] == "Running", status(api, long, NAME)

    steps = _suspend_then_end(api, long, docs[long])
    second = finished(api, long, NAME)
    print(f"{short}: {first.get('committedStep')} steps; {long}: {second.get('committedStep')} steps, "
          f"{at_gone} when the other was gone, suspended at {steps - 2}")
    assert second["phase"] == "Succeeded", second
    for tenant, final, n in ((short, first, short_steps), (long, second, steps)):
        assert final["committedStep"] == n
        assert final.get("recoveries", 0) == 0, (tenant, final)  # no worker was declared lost for an outage
        conditions = {c["type"]: c for c in final["conditions"]}
        paused = conditions.get("Paused", {"status": "False"})  # absent if this one never saw an outage
        assert paused["status"] == "False", (tenant, paused)  # not paused now
        [result] = compare(spark, oracle_spec(docs[tenant], data[tenant]), n)
        assert result.duplicates == 0 and result.equal, (tenant, result)
