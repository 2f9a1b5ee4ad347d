"""How many FTPipelines one operator carries: reconcile rate, handler latency and memory as pipelines are added.

Runs against the local cluster (``python -m tests.e2e.cluster up``, then
``eval "$(python -m tests.e2e.cluster env)"``)::

    python bench/operator_scale.py --sizes 10,50,200,500 --running 10

It installs the chart into a namespace of its own, starts ``--running``
pipelines that run (worker pods, endless input, one worker each), then adds
suspended pipelines until each size is reached (a 2-core machine cannot run
hundreds; a suspended pipeline still has a daemon, a ConfigMap, a Service and
a NetworkPolicy, and is reconciled like any other). At each size it measures:

- reconcile rate: pipelines per minute from ``create`` to their first status
  phase written by the operator (Suspended), over the pipelines just added
  (created by 8 clients at once);
- spec-change latency: a spec field (``checkpointNonce``) of ``--probes``
  suspended pipelines is patched and the time until the operator wrote that
  generation into ``status.observedGeneration`` is taken (p50, p99): this is
  what a stalled handler executor or a full thread pool shows as;
- handler p99: the operator's own ``ftpipeline_operator_handler_seconds``
  over the handlers run while that size was reached (Kopf's executor: what
  a slow one delays is every other pipeline's events);
- objects written p99: ``ftpipeline_operator_publish_seconds``, each
  attempt's server-side apply of the pipeline's ConfigMap, Service and
  NetworkPolicy (on the pipeline's coordinator thread; part of the
  reconcile rate above);
- the operator's resident memory and its coordinator threads in use.

The published mark it is set against: the Kubeflow Spark Operator's own
benchmark, about 130-150 applications per minute per controller.
"""

from __future__ import annotations

import argparse
import random
import statistics
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, cast

from kubernetes import client, config
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.e2e.conftest import create_namespace  # noqa: E402
from tests.e2e.test_operator import (GROUP, HOST_ROOT, PLURAL, VERSION, _install, _writable_dir,  # noqa: E402
                                     host_claim, pipeline)

CREATORS = 8  # clients creating pipelines at once
HANDLERS = ("all", "reconcile", "pod_event")  # the histogram's handler label (cleanup runs at the end only)
PUBLISH = "publish"  # an attempt's writes of the pipeline's objects (on a coordinator thread, not a handler's)
KUBERNETES_SPARK_OPERATOR_APPS_PER_MIN = 140  # the middle of the Kubeflow Spark Operator's published 130-150
console = Console()


def _operator_metrics(core: client.CoreV1Api, namespace: str) -> dict[str, Any]:
    [ip] = [p.status.pod_ip for p in core.list_namespaced_pod(
        namespace, label_selector="app.kubernetes.io/component=operator").items if p.status and p.status.pod_ip]
    text = urllib.request.urlopen(f"http://{ip}:9100/metrics", timeout=10).read().decode()
    out: dict[str, Any] = {"buckets": {}}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "process_resident_memory_bytes":
                out["rss"] = sample.value
            elif sample.name == "ftpipeline_operator_running_coordinators":
                out["running"] = sample.value
            elif sample.name in ("ftpipeline_operator_handler_seconds_bucket",
                                 "ftpipeline_operator_publish_seconds_bucket"):
                le, handler = float(sample.labels["le"]), sample.labels.get("handler", PUBLISH)
                for key in (handler, "all") if handler != PUBLISH else (PUBLISH,):
                    into = out["buckets"].setdefault(key, {})
                    into[le] = into.get(le, 0.0) + sample.value
    return out


def _p99_between(before: dict[float, float], after: dict[float, float]) -> float:
    """The 0.99 quantile's bucket bound of the handler runs between two scrapes (0: none ran)."""
    counts = {le: after.get(le, 0.0) - before.get(le, 0.0) for le in sorted(after)}
    total = counts.get(float("inf"), 0.0)
    if total <= 0:
        return 0.0
    for le, n in counts.items():
        if n >= 0.99 * total:
            return le
    return float("inf")


def _suspended_doc(namespace: str, name: str) -> dict[str, Any]:
    doc = pipeline(namespace, name, 10, HOST_ROOT / "never-run")
    doc["spec"]["suspend"] = True
    return doc


def _phases(api: client.CustomObjectsApi, namespace: str) -> dict[str, dict[str, Any]]:
    items: list[dict[str, Any]] = cast(Any, api.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL))["items"]
    return {o["metadata"]["name"]: dict(o.get("status") or {}) for o in items}


def _add(api: client.CustomObjectsApi, namespace: str, names: list[str],
         doc_of: Callable[[str], dict[str, Any]]) -> float:
    """Create the pipelines ``names`` (``doc_of`` each); pipelines per minute from the first create to the
    last one's first status phase."""
    created: dict[str, float] = {}
    t0 = time.monotonic()

    def create(name: str) -> None:  # side by side, as users and CI systems apply: one at a time measured the client
        api.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, doc_of(name))
        created[name] = time.monotonic()

    with ThreadPoolExecutor(CREATORS) as pool:
        list(pool.map(create, names))
    seen: dict[str, float] = {}
    deadline = time.monotonic() + 900
    while len(seen) < len(names) and time.monotonic() < deadline:
        now = time.monotonic()
        for name, st in _phases(api, namespace).items():
            if name in created and name not in seen and st.get("phase"):
                seen[name] = now
        time.sleep(0.25)
    if len(seen) < len(names):
        raise SystemExit(f"{len(names) - len(seen)} pipelines got no status phase within 15 min")
    return len(names) / max(max(seen.values()) - t0, 1e-9) * 60


def _probe(api: client.CustomObjectsApi, namespace: str, names: list[str], probes: int) -> list[float]:
    """Seconds from a spec patch to its generation in status.observedGeneration, for ``probes`` pipelines."""
    out = []
    for name in random.sample(names, min(probes, len(names))):
        obj: Any = api.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name,
                                                 {"spec": {"checkpointNonce": uuid.uuid4().hex[:8]}})
        generation = obj["metadata"]["generation"]
        t0 = time.monotonic()
        while time.monotonic() - t0 < 120:
            got: Any = api.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
            st = got.get("status") or {}
            if st.get("observedGeneration") == generation:
                break
            time.sleep(0.05)
        out.append(time.monotonic() - t0)
    return out


def _start_running(api: client.CustomObjectsApi, namespace: str, n: int) -> tuple[list[str], float]:
    """Create ``n`` pipelines that run (side by side, as ``_add`` creates); their reconcile rate, once every
    one committed a step."""
    names = [f"run-{i}-{uuid.uuid4().hex[:4]}" for i in range(n)]
    docs = {}
    for name in names:
        data = _writable_dir(HOST_ROOT / f"scale-{namespace}-{name}")
        doc = pipeline(namespace, name, 10, data)
        del doc["spec"]["steps"]["maxSteps"]  # endless: it runs for the whole benchmark
        doc["spec"]["workers"] = 1
        host_claim(client.CoreV1Api(api.api_client), namespace, f"{name}-data", data)
        docs[name] = doc
    rate = _add(api, namespace, names, docs.__getitem__)
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        phases = _phases(api, namespace)
        if all((phases.get(n) or {}).get("committedStep") for n in names):
            return names, rate
        time.sleep(2)
    raise SystemExit(f"the running pipelines did not all commit a step: "
                     f"{ {n: (phases.get(n) or {}).get('phase') for n in names} }")


def _teardown(api: client.CustomObjectsApi, core: client.CoreV1Api, namespace: str) -> None:
    """Pipelines first, while their operator still runs their finalizers; then the release (its cluster-wide
    objects: a deleted namespace alone leaves them, and the next install refuses to adopt them)."""
    subprocess.run(["kubectl", "delete", PLURAL, "--all", "-n", namespace, "--wait=false"], capture_output=True)
    deadline = time.monotonic() + 600
    while _phases(api, namespace) and time.monotonic() < deadline:
        time.sleep(2)
    subprocess.run(["helm", "uninstall", "ftp", "--namespace", namespace, "--wait"], capture_output=True)
    core.delete_namespace(namespace)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,50,200,500")
    parser.add_argument("--running", type=int, default=10)
    parser.add_argument("--probes", type=int, default=20)
    parser.add_argument("--keep", action="store_true", help="leave the namespace for a look afterwards")
    args = parser.parse_args()
    sizes = sorted(int(s) for s in args.sizes.split(","))
    kube = config.new_client_from_config()  # type: ignore[no-untyped-call]
    api, core = client.CustomObjectsApi(kube), client.CoreV1Api(kube)
    subprocess.run(["kubectl", "apply", "-f", str(ROOT / "crds")], check=True, capture_output=True)
    namespace = create_namespace(kube, "scale")
    table = Table(title=f"one operator, {args.running} pipelines running, the rest suspended")
    for column in ("pipelines", "reconcile rate (/min)", "vs Spark Operator's mark", "spec change p50 (s)",
                   "spec change p99 (s)", "handler p99 (s): " + " / ".join(HANDLERS), "objects written p99 (s)",
                   "operator RSS (MiB)", "coordinator threads"):
        table.add_column(column, justify="right")
    try:
        with console.status("installing the chart"):
            _install(namespace, "--set", f"operator.maxRunningPipelines={max(args.running, 1) + 10}")
        before = _operator_metrics(core, namespace)
        with console.status(f"starting {args.running} running pipelines"):
            running, rate = _start_running(api, namespace, args.running)
        suspended: list[str] = []
        for size in sizes:
            want = size - len(running) - len(suspended)
            if want < 0 or (want == 0 and suspended):
                continue
            all_running = want == 0
            if all_running:  # the size the running pipelines make: their own row, probed while they run
                probed = running
            else:
                before = _operator_metrics(core, namespace)
                names = [f"sus-{len(suspended) + i}" for i in range(want)]
                with console.status(f"adding {want} pipelines (to {size})"):
                    rate = _add(api, namespace, names, lambda name: _suspended_doc(namespace, name))
                suspended += names
                probed = suspended
            with console.status(f"{args.probes} spec changes at {size} pipelines"):
                latencies = sorted(_probe(api, namespace, probed, args.probes))
            after = _operator_metrics(core, namespace)
            p99 = latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))]
            table.add_row(f"{size}" + (" (all running)" if all_running else ""), f"{rate:,.0f}",
                          f"{rate / KUBERNETES_SPARK_OPERATOR_APPS_PER_MIN:.2f}x",
                          f"{statistics.median(latencies):.2f}", f"{p99:.2f}",
                          " / ".join(f"{_p99_between(before['buckets'].get(h, {}), after['buckets'].get(h, {})):g}"
                                     for h in HANDLERS),
                          f"{_p99_between(before['buckets'].get(PUBLISH, {}), after['buckets'].get(PUBLISH, {})):g}",
                          f"{after.get('rss', 0) / 2**20:,.0f}", f"{after.get('running', 0):.0f}")
            console.print(table)
    finally:
        if not args.keep:
            with console.status("deleting the pipelines, the release and the namespace"):
                _teardown(api, core, namespace)
    console.print(f"the mark: the Kubeflow Spark Operator's published ~{KUBERNETES_SPARK_OPERATOR_APPS_PER_MIN} "
                  "applications per minute per controller (its own benchmark, not run here)")


if __name__ == "__main__":
    main()
