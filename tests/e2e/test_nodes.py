"""Several nodes: a node lost with workers on it, and a node drained.

These need a cluster with a pool of at least three nodes that a pipeline's pods may be placed on (label and
``NoSchedule`` taint ``e2e.ftpipeline.io/pool=pipelines``: ``python -m tests.e2e.cluster up --nodes 4``), and a
command that stops and starts one of them (``FTPIPELINE_E2E_NODE_FAULT stop|start <node>``, which the local
provider's ``env`` sets). The pipeline's workers tolerate the taint and are spread over the pool by the
operator's default topology spread (five workers on three nodes: two nodes run two). The module's release puts
Redis on the pool too, and ZooKeeper as a three-member ensemble that may use the pool (its members on different
nodes); everything else stays off it. The first two tests leave Redis's node alone.

- A node stopped (its kubelet, container runtime and pods frozen, its pod addresses silent, as a machine that
  loses power) while two of the five workers run on it, and a ZooKeeper follower where the spread allows: the
  heartbeats expire, both workers are declared lost together, their channels recover on the survivors, the
  replacements run on live nodes while Kubernetes still shows the dead node's pods, the other two ZooKeeper
  members keep their quorum, and the output equals the oracle.
- A node drained (``kubectl drain``): each worker on it hands its channels over before its pod goes, one at a
  time as the disruption budget allows; no recovery is counted and the output equals the oracle.
- Redis's node stopped, with workers on it: the workers are recovered from at once, Redis once Kubernetes has
  moved it (the chart's nodeLostTolerationSeconds); the run waits for it meanwhile.
- A ZooKeeper member's node stopped (a follower's, with no worker and not Redis on it): the run goes on with
  the other two members and recovers nothing.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import subprocess
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from ftpipeline.embedded.zookeeper import mode
from ftpipeline.oracle import compare
from ftpipeline_operator import render

from .conftest import apply_crds, create_namespace, dump_operator, failed
from .test_operator import (GROUP, PLURAL, VERSION, chart, create_pipeline, events, finished, oracle_spec, pipeline,
                            status, wait_for, _writable_dir, HOST_ROOT)
from .test_operator import spark  # noqa: F401 - a fixture

POOL, POOL_VALUE = "e2e.ftpipeline.io/pool", "pipelines"
REDIS = "app.kubernetes.io/component=redis"
ZOOKEEPER = "app.kubernetes.io/component=zookeeper"
FAULT = os.environ.get("FTPIPELINE_E2E_NODE_FAULT", "")


@pytest.fixture(scope="module")
def namespace(kube: client.ApiClient) -> Iterator[str]:
    """One namespace and one release for the module (the tests break nodes, not the release): the chart with its
    Redis on the pool, so that a test can take Redis's node down (the others leave that node alone), and its
    ZooKeeper as a three-member ensemble allowed on the pool."""
    name = create_namespace(kube, "nodes")
    apply_crds(kube)
    tolerate = f'[{{"key": "{POOL}", "operator": "Exists", "effect": "NoSchedule"}}]'
    on = ["--set-json", f'redis.nodeSelector={{"{POOL}": "{POOL_VALUE}"}}', "--set-json", f"redis.tolerations={tolerate}",
          "--set", "zookeeper.replicas=3", "--set-json", f"zookeeper.tolerations={tolerate}"]
    try:
        with chart(name, *on):
            yield name
    finally:
        client.CoreV1Api(kube).delete_namespace(name, grace_period_seconds=0)


@pytest.fixture(autouse=True)
def operator_log_on_failure(request: pytest.FixtureRequest, kube: client.ApiClient, namespace: str) -> Iterator[None]:
    yield
    if failed(request):
        dump_operator(kube, namespace)


def redis_node(core: client.CoreV1Api, namespace: str) -> str:
    [redis] = [p for p in core.list_namespaced_pod(namespace, label_selector=REDIS).items
               if p.metadata.deletion_timestamp is None]
    return str(redis.spec.node_name)


@pytest.fixture
def pool(kube: client.ApiClient) -> list[str]:
    nodes = client.CoreV1Api(kube).list_node(label_selector=f"{POOL}={POOL_VALUE}").items
    if len(nodes) < 3:
        pytest.skip(f"needs a pool of 3 nodes labelled {POOL}={POOL_VALUE} (python -m tests.e2e.cluster up --nodes 4)")
    return sorted(n.metadata.name for n in nodes)


@contextlib.contextmanager
def stopped(node: str) -> Iterator[None]:
    """``node`` stopped for the block, started again after it (whatever happened)."""
    if not FAULT:
        pytest.skip("no FTPIPELINE_E2E_NODE_FAULT: this cluster's provider cannot stop a node")
    subprocess.run([*shlex.split(FAULT), "stop", node], check=True)
    try:
        yield
    finally:
        subprocess.run([*shlex.split(FAULT), "start", node], check=True)


def on_pool(doc: dict[str, Any], workers: int) -> dict[str, Any]:
    """The pipeline's workers on the pool only (a toleration for its taint, a selector of its label)."""
    spec = doc["spec"]
    spec["workers"] = workers
    spec["tolerations"] = [{"key": POOL, "operator": "Equal", "value": POOL_VALUE, "effect": "NoSchedule"}]
    spec["nodeSelector"] = {POOL: POOL_VALUE}
    return doc


def placement(core: client.CoreV1Api, namespace: str, name: str) -> dict[str, str]:
    """Each running worker pod of the pipeline and its node."""
    selector = ",".join(f"{k}={v}" for k, v in render.worker_labels(name).items())
    return {p.metadata.name: p.spec.node_name for p in core.list_namespaced_pod(namespace, label_selector=selector).items
            if p.spec.node_name}


def busiest(where: dict[str, str], but: str, preferring: set[str] | None = None) -> str:
    """The node with the most of the pipeline's workers, other than ``but`` (of equals, one in ``preferring``)."""
    nodes = sorted(n for n in where.values() if n != but)
    return max(nodes, key=lambda n: (nodes.count(n), n in (preferring or set())))


def start_on_pool(api: client.CustomObjectsApi, namespace: str, prefix: str, steps: int, workers: int,
                  rows: int = 6000, avoiding: str = "") -> tuple[str, dict[str, Any], Any]:
    """A pipeline's workers on the pool (none on the node ``avoiding``), running once step 3 is committed."""
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    data = _writable_dir(HOST_ROOT / name)
    doc = on_pool(pipeline(namespace, name, steps, data), workers)
    if avoiding:
        doc["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": [avoiding]}]}]}}}
    for stage in doc["spec"]["stages"]:
        stage["parallelism"] = workers  # a channel of each stage on every worker: each one lost or drained has some
        if "source" in stage:
            stage["source"]["generator"]["rowsPerStep"] = rows
    create_pipeline(api, doc, data)
    wait_for("step 3 committed", lambda: (status(api, namespace, name).get("committedStep") or 0) >= 3, 300)
    return name, doc, data


def test_a_stopped_node_loses_its_workers_together_and_the_run_recovers_on_the_others(
        kube: client.ApiClient, namespace: str, spark: object, pool: list[str]) -> None:  # noqa: F811
    api, core = client.CustomObjectsApi(kube), client.CoreV1Api(kube)
    steps = 60
    name, doc, data = start_on_pool(api, namespace, "nodelost", steps, workers=5)
    before = placement(core, namespace, name)
    assert set(before.values()) <= set(pool), before
    members = member_modes(core, namespace)
    followers = {node for node, role in members.values() if role == "follower"}
    victim = busiest(before, but=redis_node(core, namespace), preferring=followers)
    lost = sorted(pod for pod, node in before.items() if node == victim)
    assert len(lost) >= 2, f"the spread put fewer than two workers on {victim}: {before}"
    with stopped(victim):
        at_stop, began = status(api, namespace, name).get("committedStep") or 0, time.monotonic()
        wait_for("the next committed step", lambda: (status(api, namespace, name).get("committedStep") or 0) > at_stop,
                 180)
        took = time.monotonic() - began
        print(f"node {victim} stopped at step {at_stop} with {lost}: next step committed {took:.2f} s later")
        final = finished(api, namespace, name)
        after = placement(core, namespace, name)
        replacements = {pod: node for pod, node in after.items() if pod not in before}
        node_view = core.read_node(victim)
        left = member_modes(core, namespace, but=victim)
    ready = [c.status for c in node_view.status.conditions if c.type == "Ready"]
    print(f"replacements {replacements}; {victim} Ready={ready} at the end; ZooKeeper members {members}, those "
          f"left {left}; status {final}")
    if victim in followers:  # a ZooKeeper member went with the workers: the other two kept the quorum
        assert sorted(role for _, role in left.values()) == ["follower", "leader"], left
    assert final["phase"] == "Succeeded", final
    assert final["committedStep"] == steps
    assert final["recoveries"] >= 1, final
    assert replacements and victim not in replacements.values(), (victim, replacements)
    assert events(core, namespace, name, "Recovered")
    [result] = compare(spark, oracle_spec(doc, data), steps)
    assert result.equal and result.duplicates == 0, result
    api.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)


def test_a_drained_node_hands_its_workers_channels_over_with_no_recovery(
        kube: client.ApiClient, namespace: str, spark: object, pool: list[str]) -> None:  # noqa: F811
    api, core = client.CustomObjectsApi(kube), client.CoreV1Api(kube)
    steps = 120  # long enough to outlast the drain (about 30 steps): the second worker waits for the first's replacement
    name, doc, data = start_on_pool(api, namespace, "drained", steps, workers=5, rows=2000)
    before = placement(core, namespace, name)
    victim = busiest(before, but=redis_node(core, namespace))
    leaving = sorted(pod for pod, node in before.items() if node == victim)
    assert len(leaving) >= 2, f"the spread put fewer than two workers on {victim}: {before}"
    at_drain, began = status(api, namespace, name).get("committedStep") or 0, time.monotonic()
    try:
        out = subprocess.run(["kubectl", "drain", victim, "--ignore-daemonsets", "--delete-emptydir-data",
                              "--timeout=180s"], capture_output=True, text=True)
        took, at_done = time.monotonic() - began, status(api, namespace, name).get("committedStep") or 0
        assert out.returncode == 0, out.stdout + out.stderr
        waited = [line for line in out.stderr.splitlines() if "disruption budget" in line and name in line]
        assert waited, out.stderr  # the second worker waited for the first's replacement (not ZooKeeper's budget)
        print(f"drain of {victim} ({leaving}): {took:.2f} s, steps {at_drain} -> {at_done} meanwhile "
              f"({(at_done - at_drain) / took:.1f} steps/s)")
        final = finished(api, namespace, name)
    finally:
        subprocess.run(["kubectl", "uncordon", victim], capture_output=True)
    assert final["phase"] == "Succeeded", final
    assert final["committedStep"] == steps
    assert not final.get("recoveries"), final  # handovers, not recoveries
    evacuated = events(core, namespace, name, "Evacuated")
    print(f"Evacuated: {evacuated}")
    assert evacuated, "an Event says so"
    assert not events(core, namespace, name, "Recovered")
    [result] = compare(spark, oracle_spec(doc, data), steps)
    assert result.equal and result.duplicates == 0, result
    api.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)


def test_the_node_holding_redis_stopped_with_workers_the_run_waits_for_redis_elsewhere_and_recovers(
        kube: client.ApiClient, namespace: str, spark: object, pool: list[str]) -> None:  # noqa: F811
    """Redis's node stops with workers on it: the workers are lost at once (heartbeats), Redis only once
    Kubernetes evicts it from the dead node (node-monitor grace, then the chart's 30 s toleration) and starts
    it on another pool node from its append-only file; meanwhile the run waits, then recovers."""
    api, core = client.CustomObjectsApi(kube), client.CoreV1Api(kube)
    steps = 60
    name, doc, data = start_on_pool(api, namespace, "redislost", steps, workers=4)
    selector = REDIS
    victim = redis_node(core, namespace)
    assert victim in pool, victim
    lost = sorted(pod for pod, node in placement(core, namespace, name).items() if node == victim)
    with stopped(victim):
        at_stop, began = status(api, namespace, name).get("committedStep") or 0, time.monotonic()
        wait_for("the next committed step", lambda: (status(api, namespace, name).get("committedStep") or 0) > at_stop,
                 300)
        took = time.monotonic() - began

        def redis_elsewhere() -> list[str]:
            pods = core.list_namespaced_pod(namespace, label_selector=selector).items
            return [p.spec.node_name for p in pods if p.spec.node_name not in (None, victim)
                    and any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])]

        moved = wait_for("Redis ready on another node", redis_elsewhere, 300)
        redis_back, at_back = time.monotonic() - began, status(api, namespace, name).get("committedStep") or 0
        wait_for("a step committed after Redis's return",
                 lambda: (status(api, namespace, name).get("committedStep") or 0) > at_back, 300)
        resumed = time.monotonic() - began
        final = finished(api, namespace, name)
        print(f"node {victim} with Redis and {lost} stopped at step {at_stop}: next step committed {took:.2f} s later, "
              f"Redis ready on {moved} {redis_back:.1f} s later, a step committed after that {resumed:.1f} s after the "
              f"stop; {final.get('recoveries')} recoveries")
    assert final["phase"] == "Succeeded", final
    assert final["committedStep"] == steps
    assert moved and victim not in moved, (victim, moved)
    assert events(core, namespace, name, "RedisUnavailable"), "the pause is said"
    [result] = compare(spark, oracle_spec(doc, data), steps)
    assert result.equal and result.duplicates == 0, result
    api.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)


def member_modes(core: client.CoreV1Api, namespace: str, but: str = "") -> dict[str, tuple[str, str]]:
    """Each ZooKeeper member pod (not those on the node ``but``): its node, and ``leader``/``follower``/"" as its
    ``srvr`` says."""
    out = {}
    for pod in core.list_namespaced_pod(namespace, label_selector=ZOOKEEPER).items:
        if pod.spec.node_name == but:
            continue
        said = subprocess.run(["kubectl", "-n", namespace, "exec", pod.metadata.name, "--", "bash", "-c",
                               "exec 3<>/dev/tcp/127.0.0.1/2182 && printf srvr >&3 && cat <&3"],
                              capture_output=True, text=True, timeout=30).stdout
        out[pod.metadata.name] = (str(pod.spec.node_name), mode(said))
    return out


def zookeeper_connections(core: client.CoreV1Api, namespace: str) -> dict[str, int]:
    """How many established connections the operator's pods (where the coordinators run) hold to each
    ZooKeeper member pod, from their ``/proc/net/tcp``."""
    members = {pod.status.pod_ip: pod.metadata.name
               for pod in core.list_namespaced_pod(namespace, label_selector=ZOOKEEPER).items}
    counts = {name: 0 for name in members.values()}
    for pod in core.list_namespaced_pod(namespace, label_selector="app.kubernetes.io/component=operator").items:
        table = subprocess.run(["kubectl", "-n", namespace, "exec", pod.metadata.name, "--", "cat", "/proc/net/tcp"],
                               capture_output=True, text=True, timeout=30).stdout
        for line in table.splitlines()[1:]:
            fields = line.split()
            address, port = fields[2].split(":")
            ip = ".".join(str(int(address[i:i + 2], 16)) for i in (6, 4, 2, 0))  # little-endian hex
            if fields[3] == "01" and ip in members:  # ESTABLISHED
                counts[members[ip]] += 1
    return counts


def test_a_zookeeper_members_node_stopped_costs_the_run_no_recovery(
        kube: client.ApiClient, namespace: str, spark: object, pool: list[str]) -> None:  # noqa: F811
    """A follower's node stops: the quorum stays, and the sessions that were on it (the coordinator's, perhaps
    a worker's) move to the other two members: a client's socket gives up on a silent server after 1.5 s
    (``zkclient.SILENT_SERVER_MS``), so the steps stall about that long if the coordinator's session was there,
    and not at all otherwise; no worker's session expires, nothing is recovered."""
    api, core = client.CustomObjectsApi(kube), client.CoreV1Api(kube)
    modes = wait_for("three ZooKeeper members, one leading", lambda: (
        m := member_modes(core, namespace)) and sorted(role for _, role in m.values()) == ["follower", "follower",
                                                                                          "leader"] and m, 300)
    nodes = [node for node, _ in modes.values()]
    assert len(set(nodes)) == 3, f"the members share a node: {modes}"
    candidates = [node for node, role in modes.values() if role == "follower" and node in pool
                  and node != redis_node(core, namespace)]
    if not candidates:
        pytest.skip(f"no follower on a pool node without Redis to stop: {modes}")
    victim = candidates[0]
    steps = 40
    name, doc, data = start_on_pool(api, namespace, "zkmember", steps, workers=4, avoiding=victim)
    assert victim not in placement(core, namespace, name).values()
    held = zookeeper_connections(core, namespace)  # the coordinator's session is on one of these
    on_victim = sum(n for member, n in held.items() if modes[member][0] == victim)
    with stopped(victim):
        began = last = time.monotonic()
        at_stop = seen = status(api, namespace, name).get("committedStep") or 0
        stall = 0.0
        while time.monotonic() - began < 20 and seen < steps:  # the longest wait between two commits
            time.sleep(0.25)
            now, step = time.monotonic(), status(api, namespace, name).get("committedStep") or 0
            if step > seen:
                stall, seen, last = max(stall, now - last), step, now
        final = finished(api, namespace, name)
        left = member_modes(core, namespace, but=victim)
    paused = events(core, namespace, name, "ZooKeeperUnavailable")
    print(f"the node {victim} of a ZooKeeper follower stopped at step {at_stop}: the longest wait between two "
          f"commits over the next 20 s {stall:.2f} s; pauses said {paused}; the members left {left}; the operator's "
          f"connections to ZooKeeper {held}, {on_victim} of them on the stopped member")
    assert final["phase"] == "Succeeded", final
    assert final["committedStep"] == steps
    assert not final.get("recoveries"), final  # no worker's session expired
    assert sorted(role for _, role in left.values()) == ["follower", "leader"], left
    assert len(events(core, namespace, name, "ZooKeeperRecovered")) == len(paused), "each pause ended by itself"
    [result] = compare(spark, oracle_spec(doc, data), steps)
    assert result.equal and result.duplicates == 0, result
    api.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
