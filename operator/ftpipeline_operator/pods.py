"""Worker pods before a run starts: the spec's pod checked by a dry run, an earlier run's pods gone.

Why before: a worker pod the API server refuses (an invalid volume, a
security context the namespace forbids) fails the pipeline at once with the
server's own words, instead of a run waiting for workers that never come;
and pods of an earlier run (a previous operator, or before a restart) are
replaced, never adopted, so a run only ever talks to workers it started.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, cast

import pydantic
from kubernetes import client

from ftpipeline.lineage.naming import WorkerId
from ftpipeline_operator import render
from ftpipeline_operator.resolve import Unrunnable, pod_problems
from ftpipeline_operator.status import api_message


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
