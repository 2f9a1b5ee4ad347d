"""One coordinator per FTPipeline, run by the operator: the same coordinator as ``ftpipeline run``.

A Kopf daemon thread per pipeline calls :meth:`PipelineRunner.run`. It
validates the pipeline (the parts a structural schema cannot check), opens
the run (``coordinator/session.py``) and runs the coordinator with workers as
pods (``cluster.py``), reporting through ``status.py``. The same thread
handles what changes a run from outside:

    PENDING --daemon started--> STARTING --workers joined--> RUNNING
    RUNNING --pod lost--> RECOVERING --recovered--> RUNNING
    RUNNING --maxSteps committed or input ended--> SUCCEEDED
    RUNNING --spec.suspend--> SUSPENDED --suspend cleared--> STARTING (resumed)
    RUNNING --spec.restartNonce changed--> STARTING (resumed on fresh pods)
    any     --invalid spec / PipelineFailed--> FAILED --spec changed--> STARTING (resumed)
    any     --daemon stopped (deletion, operator exit)--> (pods kept on exit, resumed by the next operator)

Every (re)start after the first is a *resume*: Feldera's start-up — open the
newest checkpoint every worker has and replay later steps from the step
log; the exactly-once barrier drops what was already released. An operator
that restarts finds the previous run's pods (another run label), deletes
them, and resumes the same way.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from kubernetes import client

from ftpipeline.coordinator.coordinator import Coordinator, Interrupted, PipelineFailed
from ftpipeline.coordinator.recovery import RecoveryRecord
from ftpipeline.coordinator.session import open_session
from ftpipeline.obs.metrics import RunMetrics
from ftpipeline.spec.load import SpecError, parse_pipeline
from ftpipeline.spec.model import PipelineSpec
from ftpipeline.spec.schema import API_GROUP, API_VERSION, PLURAL
from ftpipeline_operator import render
from ftpipeline_operator.cluster import KubernetesCluster
from ftpipeline_operator.status import StatusReporter

log = logging.getLogger("ftpipeline.operator.runner")


class Stopped(Protocol):
    """Kopf's daemon stop flag (a ``kopf.DaemonStopped``)."""

    def __bool__(self) -> bool: ...
    def wait(self, timeout: float | None = None) -> Any: ...


@dataclass(frozen=True)
class Defaults:
    """Endpoints for pipelines that name none (the chart's in-cluster Redis and ZooKeeper)."""

    redis_url: str = ""
    zookeeper: str = ""


def read_secret(core: client.CoreV1Api, namespace: str, ref: Mapping[str, str]) -> str:
    import base64

    secret = core.read_namespaced_secret(ref["name"], namespace)
    data = (secret.data or {}).get(ref["key"])
    if data is None:
        raise PipelineFailed(f"Secret {namespace}/{ref['name']} has no key {ref['key']!r}")
    return base64.b64decode(data).decode()


def resolve_spec(body: Mapping[str, Any], core: client.CoreV1Api, defaults: Defaults) -> PipelineSpec:
    """The runtime's PipelineSpec of an FTPipeline, with endpoints resolved (Secrets, defaults)."""
    spec = parse_pipeline(render.pipeline_document(body), Path(render.PIPELINE_DIR),
                          source=f"ftpipeline {body['metadata']['namespace']}/{body['metadata']['name']}",
                          check_entry_point=False)
    raw = body["spec"]
    ns = body["metadata"]["namespace"]
    redis_ref = (raw.get("redis") or {}).get("secretRef")
    zk_ref = (raw.get("zookeeper") or {}).get("secretRef")
    redis_url = read_secret(core, ns, redis_ref) if redis_ref else (spec.redis_url or defaults.redis_url)
    zookeeper = read_secret(core, ns, zk_ref) if zk_ref else (spec.zookeeper or defaults.zookeeper or None)
    return replace(spec, redis_url=redis_url, zookeeper=zookeeper)


class PipelineRunner:
    def __init__(self, key: tuple[str, str], core: client.CoreV1Api, custom: client.CustomObjectsApi,
                 defaults: Defaults, metrics_registry: Any, post_event: Callable[[str, str, str], None]) -> None:
        self.namespace, self.name = key
        self.core = core
        self.custom = custom
        self.defaults = defaults
        self.registry = metrics_registry
        self.post_event = post_event
        self.body: Mapping[str, Any] = {}
        self.cluster: KubernetesCluster | None = None
        self.reporter: StatusReporter | None = None
        self._stop_reason: str | None = None
        self._checkpoint_now = threading.Event()
        self._changed = threading.Event()
        self.ran_before = False
        self.retry_s = 10.0

    # --- from the handlers -------------------------------------------------
    def update_body(self, body: Mapping[str, Any]) -> None:
        """A newer FTPipeline. Only a new generation (a spec change) acts on the run."""
        old = self.body.get("spec", {}) if self.body else {}
        changed = bool(self.body) and body["metadata"].get("generation") != self.body["metadata"].get("generation")
        self.body = body
        if not changed:
            return
        new = body["spec"]
        if new.get("suspend") and not old.get("suspend"):
            self._stop_reason = "suspended"
        if new.get("restartNonce") != old.get("restartNonce"):
            self._stop_reason = "restart requested"
        if new.get("checkpointNonce") != old.get("checkpointNonce"):
            self._checkpoint_now.set()
        self._changed.set()

    def pod_event(self, kind: str, pod: Mapping[str, Any]) -> None:
        if self.cluster is not None:
            self.cluster.on_pod_event(kind, pod)

    # --- the daemon ----------------------------------------------------------
    def patch_status(self, patch: dict[str, Any]) -> None:
        self.custom.patch_namespaced_custom_object_status(
            API_GROUP, API_VERSION, self.namespace, PLURAL, self.name, {"status": patch})

    def _reporter(self) -> StatusReporter:
        status = self.body.get("status") or {}
        reporter = StatusReporter(self.patch_status, self.post_event, self.body["metadata"].get("generation"),
                                  status.get("conditions"))
        reporter.recoveries = int(status.get("recoveries") or 0)
        return reporter

    def run(self, stopped: Stopped) -> None:
        self.ran_before = bool((self.body.get("status") or {}).get("committedStep"))
        while not stopped:
            self._changed.clear()
            self._stop_reason = None
            reporter = self.reporter = self._reporter()
            if self.body["spec"].get("suspend"):
                reporter.update(urgent=True, phase="Suspended", message="spec.suspend is true")
                self._wait_for_change(stopped)
                continue
            try:
                outcome = self._run_once(stopped, reporter)
            except (SpecError, PipelineFailed) as exc:
                reason = "Rejected" if isinstance(exc, SpecError) else "Failed"  # a spec the CRD cannot judge
                reporter.condition("Ready", False, reason, str(exc))
                reporter.event("Warning", reason, str(exc))
                reporter.update(urgent=True, phase="Failed", message=str(exc))
                log.error("pipeline failed", extra={"pipeline": self.name, "error": str(exc)})
                self._wait_for_change(stopped)
                continue
            except Exception as exc:  # Redis, ZooKeeper or the API server unreachable: try again
                message = f"cannot run: {type(exc).__name__}: {exc}; retrying in {self.retry_s:.0f} s"
                reporter.condition("Ready", False, "Unavailable", message)
                reporter.event("Warning", "Unavailable", message)
                reporter.update(urgent=True, phase="Pending", message=message)
                log.exception("run failed; retrying", extra={"pipeline": self.name})
                stopped.wait(self.retry_s)
                continue
            if outcome == "done":
                reporter.condition("Progressing", False, "Completed", "every step committed")
                reporter.update(urgent=True, phase="Succeeded", message="")
                self._wait_for_change(stopped)
            self.ran_before = True

    def _wait_for_change(self, stopped: Stopped) -> None:
        while not stopped and not self._changed.is_set():
            stopped.wait(1.0)

    def _run_once(self, stopped: Stopped, reporter: StatusReporter) -> str:
        spec = resolve_spec(self.body, self.core, self.defaults)
        run = uuid.uuid4().hex[:8]
        self._delete_stale_pods(run)
        metrics = RunMetrics(spec.name, self.registry)
        resuming = self.ran_before
        session = open_session(spec, resuming, private_dir=None)
        cluster = self.cluster = KubernetesCluster(self.core, self.body, run,
                                                   {"redis": session.redis_url, "zookeeper": session.zookeeper or ""})
        reporter.lost_reasons = cluster.diagnoses  # set before the loss is queued: the reason is always there
        reporter.on_recovered = lambda record: self._recovered(metrics, cluster, record)

        def should_stop() -> str | None:
            if stopped:
                return "operator stopping"
            if self._checkpoint_now.is_set():
                self._checkpoint_now.clear()
                coordinator.ckpt.requested = True
            reporter.check_progress(spec.progress_deadline_s)
            metrics.stalled.set(1 if reporter.stalled else 0)
            return self._stop_reason

        coordinator = Coordinator(spec, session.store, session.tables, cluster, reporter, metrics=metrics,
                                  pointer=session.pointer, commands=session.commands, resume=resuming,
                                  should_stop=should_stop,
                                  stall_timeout_s=float("inf"))
        keep_pods = False
        try:
            coordinator.run()
            return "done"
        except Interrupted as exc:
            log.info("run interrupted", extra={"pipeline": self.name, "reason": str(exc)})
            keep_pods = bool(stopped)  # the operator is exiting: leave the pods for the next one to replace
            return "interrupted"
        finally:
            reporter.flush()
            coordinator.shutdown()
            if not keep_pods:
                cluster.stop()
            session.close()
            self.cluster = None

    def _recovered(self, metrics: RunMetrics, cluster: KubernetesCluster, record: RecoveryRecord) -> None:
        """How long from the pod event to the recovery plan applied (the operator's promise: < 1 s)."""
        event_at = cluster.event_at.get(record.worker)
        if event_at is not None:
            latency = record.detected_at - event_at + record.seconds
            metrics.recovery_start.observe(latency)
            log.info("recovery applied", extra={"pipeline": self.name, "worker": record.worker,
                                                "seconds_since_event": round(latency, 4)})

    def _worker_pods(self) -> list[dict[str, Any]]:
        listing = self.core.list_namespaced_pod(self.namespace, label_selector=render.worker_selector(self.name))
        pods: list[dict[str, Any]] = listing.to_dict()["items"]
        return pods

    def _delete_stale_pods(self, run: str) -> None:
        """Pods of an earlier run (a previous operator, or before a restart) are replaced, never adopted."""
        stale = {p["metadata"]["name"] for p in self._worker_pods()
                 if (p["metadata"].get("labels") or {}).get(render.RUN_LABEL) != run}
        for name in stale:
            try:
                self.core.delete_namespaced_pod(name, self.namespace, grace_period_seconds=0)
            except client.exceptions.ApiException as exc:
                if exc.status != 404:
                    raise
        deadline = time.monotonic() + 60
        while stale and time.monotonic() < deadline:
            stale &= {p["metadata"]["name"] for p in self._worker_pods()}
            time.sleep(0.5)
