"""Workers as pods: the Kubernetes implementation of the coordinator's cluster backend.

The coordinator is the same one ``ftpipeline run`` uses; only this backend
differs from ``cluster/local.py``. Starting a worker creates its pod;
killing one (fault injection) deletes the pod with no grace period; a
worker is *lost* when its pod is deleted or fails — which the operator
learns from pod events (Kopf's watch on pods, see ``handlers.py``), not by
polling, so recovery starts as soon as the event arrives.

    CREATED --pod event: failed or deleted--> LOST (reported once, with its diagnosis)
    CREATED --declared lost by the coordinator (heartbeat expired)--> LOST, its node SUSPECT
    CREATED --stop()--> (deleted by us: not a loss)

A node is *suspect* for a while (``SUSPECT_S``) once a worker on it went silent
while its pod still looked alive: the node itself may be gone, and Kubernetes
notices only after its node-monitor grace period (40 s by default), during
which the scheduler would still place a replacement there (the node looks
emptiest once the lost workers' pods are deleted). Replacements are kept off
it (``render.avoiding``) while another node runs a worker of the pipeline
(proof that the pipeline's pods fit there); otherwise they only prefer other
nodes, so a one-node cluster still runs them.

Events of pods of an earlier run of the same pipeline (a previous operator
incarnation) carry another run label and are ignored — unless this run took
those pods over (``pods.keepable_run``): it then carries their run label,
and they are its own from the start.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, cast

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from ftpipeline.cluster.base import ClusterBackend
from ftpipeline.lineage.naming import WorkerId
from ftpipeline_operator import render
from ftpipeline_operator.failures import Diagnosis, Failure, failed, gone, leaving

log = logging.getLogger("ftpipeline.operator.cluster")
SUSPECT_S = 600.0  # how long a node whose workers went silent is avoided by replacements


class KubernetesCluster(ClusterBackend):
    detects = "its pod's deletion or failure"

    def __init__(self, core: client.CoreV1Api, body: Mapping[str, Any], run: str, defaults: Mapping[str, str],
                 clock: Callable[[], float] = time.monotonic, running: list[WorkerId] | None = None) -> None:
        self.core = core
        self.body = body
        self.namespace: str = body["metadata"]["namespace"]
        self.name: str = body["metadata"]["name"]
        self.run = run
        self.defaults = dict(defaults)
        self.clock = clock
        self.created: set[WorkerId] = set(running or ())  # pods of ``run`` left running, to take over
        self.diagnoses: dict[WorkerId, Diagnosis] = {}
        self.event_at: dict[WorkerId, float] = {}   # when the event that reported the loss arrived
        self._stopping = False
        self._lock = threading.Lock()
        self._lost: list[WorkerId] = []
        self.nodes: dict[WorkerId, str] = {}     # where each worker's pod was scheduled
        self.suspects: dict[str, float] = {}     # node -> when a worker on it went silent

    # --- the coordinator's side -------------------------------------------
    def start_worker(self, worker: WorkerId) -> None:
        suspects = self.suspect_nodes()
        with self._lock:
            healthy = {self.nodes[w] for w in self.created - set(self.diagnoses) if w in self.nodes} - set(suspects)
        pod = render.avoiding(render.worker_pod(self.body, worker, self.run, self.defaults), suspects,
                              required=bool(healthy))
        self.core.create_namespaced_pod(self.namespace, cast(client.V1Pod, pod))  # the client takes plain dicts
        with self._lock:
            self.created.add(worker)
        log.info("worker pod created", extra={"pipeline": self.name, "worker": worker, "pod": pod["metadata"]["name"]})

    def running(self) -> list[WorkerId]:
        with self._lock:
            return sorted(self.created - set(self.diagnoses))

    def kill_worker(self, worker: WorkerId) -> None:
        self._delete(worker, grace_s=0)

    def declare_lost(self, worker: WorkerId, reason: str) -> None:
        with self._lock:  # the pod is still there: its deletion (which follows) is not why it was lost
            if worker in self.created and worker not in self.diagnoses:
                self.diagnoses[worker] = Diagnosis(Failure.HEARTBEAT_EXPIRED, message=reason)
            node = self.nodes.get(worker)
            if node:
                self.suspects[node] = self.clock()
        if node:
            log.warning("node suspect: a worker on it went silent; replacements prefer other nodes",
                        extra={"pipeline": self.name, "worker": worker, "node": node})

    def suspect_nodes(self) -> list[str]:
        now = self.clock()
        with self._lock:
            return sorted(n for n, since in self.suspects.items() if now - since < SUSPECT_S)

    def why(self, worker: WorkerId) -> str:
        with self._lock:
            diagnosis = self.diagnoses.get(worker)
        return str(diagnosis) if diagnosis is not None else "its pod is gone"

    def cannot_run(self, worker: WorkerId) -> str | None:
        with self._lock:
            diagnosis = self.diagnoses.get(worker)
        return diagnosis.message if diagnosis is not None and diagnosis.failure is Failure.CANNOT_RUN else None

    def lost(self) -> list[WorkerId]:
        with self._lock:
            out, self._lost = self._lost, []
        return out

    def stop(self) -> None:
        self._stopping = True
        for worker in sorted(self.created):
            self._delete(worker, grace_s=10)

    # --- the operator's side: pod events ------------------------------------
    def on_pod_event(self, kind: str, pod: Mapping[str, Any]) -> None:
        """A pod of this pipeline changed (``kind``: ADDED, MODIFIED, DELETED, or None for a listing)."""
        labels = (pod.get("metadata") or {}).get("labels") or {}
        if labels.get(render.RUN_LABEL) != self.run or self._stopping:
            return
        worker = WorkerId(labels.get(render.WORKER_LABEL, ""))
        node = (pod.get("spec") or {}).get("nodeName")
        if node:
            with self._lock:
                self.nodes[worker] = node
        if kind != "DELETED" and leaving(pod):
            return  # a drain's eviction: the worker asks for its handover itself (worker/leaving.py)
        diagnosis = gone(pod) if kind == "DELETED" else failed(pod)
        if diagnosis is None:
            return
        with self._lock:
            if worker not in self.created or worker in self.diagnoses:
                return
            self.diagnoses[worker] = diagnosis
            self.event_at[worker] = self.clock()
            self._lost.append(worker)
        log.warning("worker lost", extra={"pipeline": self.name, "worker": worker, "reason": str(diagnosis)})
        if kind != "DELETED":
            self._delete(worker, grace_s=0)  # a failed pod holds nothing we need; free its node resources

    def _delete(self, worker: WorkerId, grace_s: int) -> None:
        try:
            self.core.delete_namespaced_pod(render.pod_name(self.name, worker), self.namespace,
                                            grace_period_seconds=grace_s)
        except ApiException as exc:
            if exc.status != 404:
                raise
