"""The chart's shared Redis and ZooKeeper under two tenants, each deleted mid-run.

One operator, one in-chart Redis and one in-chart ZooKeeper serve the whole
cluster, as the chart installs them. Two FTPipelines with the same name
(``clickstream``) run at once in two namespaces; their state is kept apart by
namespace, name and uid (``render.identity``). While both run:

1. the Redis pod is deleted: its Deployment starts another on the same
   claim (append-only file), both pipelines pause and go on;
2. the ZooKeeper pod is deleted: the same, for the command log;
3. the shorter one finishes and is deleted while the other runs: its
   finalizer must clear only its own keys and znodes, and the other must
   go on committing steps. The other has no ``maxSteps`` (its generator
   never ends), so it cannot finish first however the two speeds differ;
4. it is then suspended (``spec.suspend``) and resumed with ``maxSteps``
   two steps past where it stopped, so that it ends by itself too.

Both must end Succeeded with no worker declared lost (an outage is not a
death), with a Paused condition and Unavailable/Recovered Events for each
outage, and with output equal to the oracle. Had the finalizer removed the
other pipeline's lineage or command log, that one would have rebuilt or
started over, and its resume would miss or repeat steps (or, as a fresh run
over a sink that holds output, end Failed).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from ftpipeline.oracle import compare

from .test_operator import (GROUP, HOST_ROOT, PLURAL, VERSION, _writable_dir, deleted, finished, new_namespace,
                            oracle_spec, pipeline, status, wait_for)
from .test_operator_failures import installed, spark  # noqa: F401  (fixtures: the chart in its namespace; the oracle)

pytestmark = pytest.mark.skipif(not os.environ.get("KUBECONFIG"), reason="no cluster")

NAME = "clickstream"
SHORT = 16  # steps of the pipeline deleted first; the other runs until it is suspended


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


def _patch_spec(api: client.CustomObjectsApi, tenant: str, spec: dict[str, Any]) -> None:
    api.patch_namespaced_custom_object(GROUP, VERSION, tenant, PLURAL, NAME, {"spec": spec})


def _events(core: client.CoreV1Api, tenant: str) -> set[str]:
    return {e.reason for e in core.list_namespaced_event(tenant, field_selector=f"involvedObject.name={NAME}").items}


def test_two_same_named_pipelines_outlive_the_shared_redis_and_zookeeper_and_each_other(
        kube: client.ApiClient, installed: str, tenants: tuple[str, str], spark: object) -> None:
    api = client.CustomObjectsApi(kube)
    core = client.CoreV1Api(kube)
    docs: dict[str, dict[str, Any]] = {}
    data: dict[str, Path] = {}
    for tenant in tenants:
        data[tenant] = _writable_dir(HOST_ROOT / f"{tenant}-{NAME}")
        docs[tenant] = pipeline(tenant, NAME, SHORT, data[tenant])
    short, long = tenants
    del docs[long]["spec"]["steps"]["maxSteps"]
    for tenant in tenants:
        api.create_namespaced_custom_object(GROUP, VERSION, tenant, PLURAL, docs[tenant])
    for t in tenants:
        wait_for(f"{t}/{NAME} to commit step 2", lambda t=t: _committed(api, t) >= 2, 300)

    _delete_pod_and_go_on(core, api, installed, "redis", tenants)
    _delete_pod_and_go_on(core, api, installed, "zookeeper", tenants)

    t0 = time.monotonic()
    first = finished(api, short, NAME)
    print(f"{short} finished {time.monotonic() - t0:.0f} s after the outages; {long} at step {_committed(api, long)}")
    assert first["phase"] == "Succeeded", first
    outage_events = {"RedisUnavailable", "RedisRecovered", "ZooKeeperUnavailable", "ZooKeeperRecovered"}
    assert outage_events <= _events(core, short), _events(core, short)
    api.delete_namespaced_custom_object(GROUP, VERSION, short, PLURAL, NAME)
    t0 = time.monotonic()
    wait_for(f"{short}/{NAME} to be deleted (its finalizer done)", lambda: deleted(api, short, NAME), 120)
    at_gone = _committed(api, long)
    print(f"{short} deleted in {time.monotonic() - t0:.0f} s; {long} at step {at_gone}")
    wait_for(f"{long}/{NAME} to go on after the other was deleted", lambda: _committed(api, long) >= at_gone + 2, 300)
    assert status(api, long, NAME)["phase"] == "Running", status(api, long, NAME)

    _patch_spec(api, long, {"suspend": True})
    wait_for(f"{long}/{NAME} to be suspended", lambda: status(api, long, NAME).get("phase") == "Suspended", 180)
    steps = _committed(api, long) + 2
    _patch_spec(api, long, {"suspend": False, "steps": {"maxSteps": steps}})
    docs[long]["spec"]["steps"]["maxSteps"] = steps
    second = finished(api, long, NAME)
    print(f"{short}: {first.get('committedStep')} steps; {long}: {second.get('committedStep')} steps, "
          f"{at_gone} when the other was gone, suspended at {steps - 2}")
    assert second["phase"] == "Succeeded", second
    for tenant, final, n in ((short, first, SHORT), (long, second, steps)):
        assert final["committedStep"] == n
        assert final.get("recoveries", 0) == 0, (tenant, final)  # no worker was declared lost for an outage
        conditions = {c["type"]: c for c in final["conditions"]}
        assert conditions["Paused"]["status"] == "False", (tenant, conditions["Paused"])  # paused once, not now
        [result] = compare(spark, oracle_spec(docs[tenant], data[tenant]), n)
        assert result.duplicates == 0 and result.equal, (tenant, result)
    assert outage_events <= _events(core, long), _events(core, long)
