"""Worker pods before a run starts: the spec's pod checked by a dry run, an earlier run's pods kept or gone.

Why before: a worker pod the API server refuses (an invalid volume, a
security context the namespace forbids) fails the pipeline at once with the
server's own words, instead of a run waiting for workers that never come.

Pods of an earlier run are there when an operator handed over (the one
that stopped left them running) or died. A resumed run keeps them when it
can — a handover then costs a rollback to the newest checkpoint, not new
pods and new JVMs — and otherwise deletes them, so a run only ever talks
to workers it started or took over whole::

    pods of one earlier run, as many as spec.workers, each Running, ready, not being deleted,
        and rendered alike (``render.POD_DIGEST``) --keepable_run--> their run label is this run's;
        the coordinator checks each one answers and was created alike (``coordinator/admission.py``)
    anything else (a fresh start, a changed spec or operator default, a pod missing or failing)
        --delete_stale_pods--> gone, waited for; the run starts its own
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

import pydantic
from kubernetes import client

from ftpipeline.coordinator.errors import PipelineFailed
from ftpipeline.lineage.naming import WorkerId
from ftpipeline.spec.load import SpecError
from ftpipeline.worker.tls import Credentials
from ftpipeline_operator import render
from ftpipeline_operator.credentials import brought_in
from ftpipeline_operator.resolve import Unrunnable, pod_problems
from ftpipeline_operator.status import api_message

log = logging.getLogger("ftpipeline.operator.pods")


def check_pod(core: client.CoreV1Api, body: Mapping[str, Any], run: str, defaults: Mapping[str, str]) -> None:
    """Ask the API server whether a worker pod of ``body`` would be accepted (a dry run: nothing is created)."""
    namespace = body["metadata"]["namespace"]
    try:
        pod = render.worker_pod(body, WorkerId("w0"), run, defaults)
    except ValueError as exc:
        raise Unrunnable(str(exc)) from None
    try:
        core.create_namespaced_pod(namespace, cast(client.V1Pod, pod), dry_run="All")
    except pydantic.ValidationError as exc:  # the client's own models refuse it before sending
        own = len(pod["spec"]["volumes"]) - len(body["spec"].get("volumes") or [])
        raise Unrunnable(f"invalid worker pod: {pod_problems(exc, own)}") from None
    except client.exceptions.ApiException as exc:
        if exc.status in (400, 403, 422):
            raise Unrunnable(f"the API server rejects the worker pod: {api_message(exc)}") from None
        if exc.status != 409:  # 409: a pod of that name exists (an earlier run's): validation passed
            raise


def worker_pods(core: client.CoreV1Api, namespace: str, pipeline: str) -> list[dict[str, Any]]:
    listing = core.list_namespaced_pod(namespace, label_selector=render.worker_selector(pipeline))
    pods: list[dict[str, Any]] = listing.to_dict()["items"]
    return pods


def keepable_run(pods: list[dict[str, Any]], body: Mapping[str, Any], defaults: Mapping[str, str],
                 workers: int) -> str | None:
    """The run label of ``pods`` if a resumed run can take them over whole, else None."""
    runs = {(p["metadata"].get("labels") or {}).get(render.RUN_LABEL) for p in pods}
    if len(pods) != workers or len(runs) != 1:
        return None
    for pod in pods:
        meta, status = pod["metadata"], pod.get("status") or {}
        worker = (meta.get("labels") or {}).get(render.WORKER_LABEL, "")
        ready = [c.get("ready") for c in status.get("container_statuses") or []]  # worker_pods' snake_case
        if meta.get("deletion_timestamp") or status.get("phase") != "Running" or not ready or not all(ready):
            return None
        expected = render.worker_pod(body, WorkerId(worker), "", defaults)["metadata"]["annotations"][render.POD_DIGEST]
        if (meta.get("annotations") or {}).get(render.POD_DIGEST) != expected:
            return None
    return runs.pop()


@dataclass(frozen=True)
class Kept:
    run: str                    # their run label, this run's from now on
    credentials: Credentials    # the ones they mounted
    workers: list[WorkerId]


def pods_to_keep(core: client.CoreV1Api, body: Mapping[str, Any], defaults: Mapping[str, str], workers: int
                 ) -> Kept | None:
    """The pods an earlier run left running (an operator that handed over), with the credentials they were
    started with, for a resumed run to take over; None: they are replaced."""
    meta = body["metadata"]
    pods = worker_pods(core, meta["namespace"], meta["name"])
    run = keepable_run(pods, body, defaults, workers)
    if run is None:
        return None
    try:
        credentials = brought_in(core, body, render.worker_tls_secret(body))
    except (PipelineFailed, SpecError) as exc:  # the pods' certificate is gone: they cannot be called
        log.warning("replacing the running pods: their credentials are gone",
                    extra={"pipeline": meta["name"], "error": str(exc)})
        return None
    return Kept(run, credentials, sorted(WorkerId(p["metadata"]["labels"][render.WORKER_LABEL]) for p in pods))


def delete_stale_pods(core: client.CoreV1Api, namespace: str, pipeline: str, run: str,
                      timeout_s: float = 60.0) -> None:
    """Every worker pod of ``pipeline`` not of ``run``, deleted and waited for (at most ``timeout_s``)."""
    stale = {p["metadata"]["name"] for p in worker_pods(core, namespace, pipeline)
             if (p["metadata"].get("labels") or {}).get(render.RUN_LABEL) != run}
    for name in stale:
        try:
            core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
        except client.exceptions.ApiException as exc:
            if exc.status != 404:
                raise
    deadline = time.monotonic() + timeout_s
    while stale and time.monotonic() < deadline:
        stale &= {p["metadata"]["name"] for p in worker_pods(core, namespace, pipeline)}
        time.sleep(0.5)
