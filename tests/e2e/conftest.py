"""e2e tests: a real Kubernetes cluster, reached only through KUBECONFIG.

Bring one up with ``python -m tests.e2e.cluster up`` (built here from package
registries) or ``... up --provider kind``, then ``eval "$(python -m
tests.e2e.cluster env)"``. Any other cluster works too, given the project
image: FTPIPELINE_E2E_IMAGE (default localhost/ftpipeline:e2e) must be
present on its nodes (tests use imagePullPolicy: Never).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
IMAGE = os.environ.get("FTPIPELINE_E2E_IMAGE", "localhost/ftpipeline:e2e")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.e2e)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Keep each phase's report on the item, so that a fixture's teardown knows whether the test failed."""
    report = yield
    setattr(item, f"report_{report.when}", report)
    return report


def failed(request: pytest.FixtureRequest) -> bool:
    report = getattr(request.node, "report_call", None)
    return report is None or report.failed


def dump_operator(kube: Any, namespace: str, lines: int = 400) -> None:
    """What a failed test leaves to read: the operator's log and every FTPipeline's status and Events."""
    from kubernetes import client

    core, custom = client.CoreV1Api(kube), client.CustomObjectsApi(kube)
    for pod in core.list_namespaced_pod(namespace).items:
        for container in pod.spec.containers:
            try:
                log = core.read_namespaced_pod_log(pod.metadata.name, namespace, container=container.name,
                                                   tail_lines=lines)
            except client.exceptions.ApiException as exc:
                log = f"(no log: {exc.reason})"
            print(f"----- {namespace}/{pod.metadata.name} [{container.name}] (last {lines} lines)\n{log}")
    try:
        pipelines = custom.list_cluster_custom_object("ftpipeline.io", "v1alpha1", "ftpipelines")["items"]
    except client.exceptions.ApiException:
        pipelines = []
    for p in pipelines:
        meta = p["metadata"]
        print(f"----- FTPipeline {meta['namespace']}/{meta['name']} status: {p.get('status')}")
    for ns in sorted({p["metadata"]["namespace"] for p in pipelines}):  # once per namespace, not per pipeline
        print(f"----- Events in {ns}")
        for e in core.list_namespaced_event(ns).items:
            print(f"  {e.last_timestamp} {e.involved_object.kind}/{e.involved_object.name} {e.type} {e.reason}: "
                  f"{e.message}")


def example_pipeline(file: str = "kubernetes-volume.yaml") -> dict[str, Any]:
    """The FTPipeline of an example file of examples/clickstream/: by default the one on a ReadWriteMany volume,
    which the tests point at claims of their own (the file also holds the claim it mounts)."""
    import yaml

    docs = yaml.safe_load_all((ROOT / "examples" / "clickstream" / file).read_text())
    [doc] = [d for d in docs if d and d["kind"] == "FTPipeline"]
    return dict(doc)


@pytest.fixture(scope="session")
def kube() -> Iterator[object]:
    if not os.environ.get("KUBECONFIG"):
        pytest.skip("no cluster: set KUBECONFIG (python -m tests.e2e.cluster up, then ... env)")
    from kubernetes import client, config

    config.load_kube_config()
    api = client.ApiClient()
    yield api
    api.close()


# Pod Security Admission: every namespace the product's pods run in enforces the "restricted" level, so
# each pod the chart and the operator create is admitted under it (or the test fails on its rejection).
RESTRICTED = {"pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest"}


def create_namespace(kube: object, prefix: str, restricted: bool = True) -> str:
    """A new namespace, once its default service account exists (the controller creates it
    asynchronously; pods need it)."""
    import time

    from kubernetes import client

    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    core = client.CoreV1Api(kube)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(
        name=name, labels=RESTRICTED if restricted else None)))
    deadline = time.monotonic() + 30
    while not core.list_namespaced_service_account(name, field_selector="metadata.name=default").items:
        if time.monotonic() > deadline:
            raise AssertionError(f"no default service account in {name} after 30 s")
        time.sleep(0.1)
    return name


@pytest.fixture
def namespace(kube: object) -> Iterator[str]:
    from kubernetes import client

    name = create_namespace(kube, "e2e")
    yield name
    client.CoreV1Api(kube).delete_namespace(name, grace_period_seconds=0)


@pytest.fixture
def crd(kube: Any) -> str:
    return apply_crds(kube)


def apply_crds(kube: Any) -> str:
    """The CRDs from crds/ (FTPipeline, and Kopf's peering the operator replicas use), created or replaced,
    and established; the FTPipeline CRD's name."""
    import time

    import yaml
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    ext = client.ApiextensionsV1Api(kube)
    names = []
    for path in sorted((ROOT / "crds").glob("*.yaml")):
        doc = yaml.safe_load(path.read_text())
        name = doc["metadata"]["name"]
        names.append(name)
        try:
            ext.create_custom_resource_definition(doc)
        except ApiException as exc:
            if exc.status != 409:
                raise
            current = ext.read_custom_resource_definition(name)
            doc["metadata"]["resourceVersion"] = current.metadata.resource_version
            ext.replace_custom_resource_definition(name, doc)
    for name in names:
        for _ in range(100):
            conditions = ext.read_custom_resource_definition(name).status.conditions or []
            if any(c.type == "Established" and c.status == "True" for c in conditions):
                break
            time.sleep(0.1)
        else:
            raise AssertionError(f"CRD {name} not established")
    return "ftpipelines.ftpipeline.io"


# Debian's Prometheus is built without Kubernetes service discovery, so the fixture discovers the
# pods itself (the prometheus.io/scrape and /port annotations, as kubernetes_sd relabelling would)
# and hands them over through file_sd.
PROMETHEUS_CONFIG = """
global: {{scrape_interval: 2s, scrape_timeout: 2s}}
scrape_configs:
  - job_name: ftpipeline
    file_sd_configs:
      - files: [{targets}]
        refresh_interval: 1s
"""


def _discover(kube: Any, namespace: str, path: Path, stop: Any) -> None:
    import json

    from kubernetes import client

    core = client.CoreV1Api(kube)
    while not stop.wait(1.0):
        targets = []
        for pod in core.list_namespaced_pod(namespace).items:
            ann = pod.metadata.annotations or {}
            if ann.get("prometheus.io/scrape") == "true" and pod.status.pod_ip:
                targets.append({"targets": [f"{pod.status.pod_ip}:{ann['prometheus.io/port']}"],
                                "labels": {"pod": pod.metadata.name}})
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(targets))
        tmp.replace(path)


class Prometheus:
    """A real Prometheus (Debian's package) discovering the namespace's pods through the API server."""

    def __init__(self, url: str) -> None:
        self.url = url

    def query(self, promql: str) -> float | None:
        import json
        import urllib.parse
        import urllib.request

        with urllib.request.urlopen(f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": promql})) as r:
            result = json.load(r)["data"]["result"]
        return float(result[0]["value"][1]) if result else None

    def watch(self, promql: str) -> Callable[[], float | None]:
        """Poll ``promql`` every second from now on; the returned function stops the polling and gives the
        highest value seen (None: never any). A series of pods that end with the run is caught while they
        are scraped, not looked for after they are gone."""
        import threading

        seen: list[float] = []
        stop = threading.Event()

        def poll() -> None:
            while not stop.wait(1.0):
                try:
                    value = self.query(promql)
                except OSError:
                    continue
                if value is not None:
                    seen.append(value)

        thread = threading.Thread(target=poll, daemon=True)
        thread.start()

        def highest() -> float | None:
            stop.set()
            thread.join(5)
            return max(seen, default=None)
        return highest

    def _get(self, path: str, **params: Any) -> Any:
        import json
        import urllib.parse
        import urllib.request

        with urllib.request.urlopen(f"{self.url}{path}?" + urllib.parse.urlencode(params, doseq=True)) as r:
            return json.load(r)["data"]

    def query_range(self, promql: str, start: float, end: float, step: float) -> list[dict[str, Any]]:
        """The series a range query returns, as Grafana's time series panels ask for them."""
        return list(self._get("/api/v1/query_range", query=promql, start=start, end=end, step=step)["result"])

    def label_values(self, label: str, match: str) -> list[str]:
        """What Grafana's ``label_values(match, label)`` variable query offers."""
        return list(self._get(f"/api/v1/label/{label}/values", **{"match[]": [match]}))

    def health(self) -> list[tuple[str, str, str]]:
        """Each target's pod, health and last scrape error: what a failed assertion about scraping shows."""
        return [(t["labels"].get("pod", t["scrapeUrl"]), t["health"], t.get("lastError", "")) for t in self.targets()]

    def targets(self) -> list[dict[str, Any]]:
        import json
        import urllib.request

        with urllib.request.urlopen(f"{self.url}/api/v1/targets") as r:
            return list(json.load(r)["data"]["activeTargets"])


@pytest.fixture
def prometheus(kube: Any, namespace: str, tmp_path: Path) -> Iterator[Prometheus]:
    import shutil
    import socket
    import subprocess
    import time
    import urllib.request

    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("no prometheus on PATH (apt-get install prometheus)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    import threading

    targets = tmp_path / "targets.json"
    targets.write_text("[]")
    stop = threading.Event()
    discovery = threading.Thread(target=_discover, args=(kube, namespace, targets, stop), daemon=True)
    discovery.start()
    config = tmp_path / "prometheus.yml"
    config.write_text(PROMETHEUS_CONFIG.format(targets=targets))
    log = open(tmp_path / "prometheus.log", "wb")
    proc = subprocess.Popen([binary, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                             f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(150):
            try:
                urllib.request.urlopen(f"{url}/-/ready").close()
                break
            except OSError:
                time.sleep(0.2)
        yield Prometheus(url)
    finally:
        stop.set()
        proc.terminate()
        proc.wait(30)
        log.close()
