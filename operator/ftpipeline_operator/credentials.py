"""A run's worker credentials: issued by the operator, or brought by the pipeline, or kept from the pods.

The sidecars serve the coordinator over mutual TLS (``ftpipeline/worker/tls.py``).
Each run's credentials are a Secret its worker pods mount, and the
coordinator keeps them to call the workers:

    no spec.tls.secretName --issue--> a new CA and certificates, written to ``<name>-worker-tls``
                                      (a restart rotates them: the previous run's pods are gone)
    spec.tls.secretName    --brought--> the pipeline's own, checked before any pod mounts it
    pods of an earlier run taken over (``pods.py``) --brought--> read back from the Secret
                                      those pods mounted, which nothing rewrote since they started
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from ftpipeline.coordinator.errors import PipelineFailed
from ftpipeline.spec.load import Problem, SpecError
from ftpipeline.worker.tls import FILES as TLS_FILES
from ftpipeline.worker.tls import Credentials
from ftpipeline.worker.tls import generate
from ftpipeline.worker.tls import problems as tls_problems
from ftpipeline_operator import render
from ftpipeline_operator.stores import put_secret

FIELD = "spec.tls.secretName"


def issue(core: client.CoreV1Api, body: Mapping[str, Any], identity: str) -> Credentials:
    """This run's worker credentials, as the Secret its pods mount in their sidecar."""
    brought = (body["spec"].get("tls") or {}).get("secretName")
    if brought:
        return brought_in(core, body, str(brought))
    credentials = generate(identity)
    put_secret(core, render.tls_secret(body, credentials))
    return credentials


def brought_in(core: client.CoreV1Api, body: Mapping[str, Any], name: str) -> Credentials:
    """The credentials in Secret ``name``, checked (named after ``spec.tls.secretName``, which brings them)."""
    namespace = body["metadata"]["namespace"]
    try:
        data = core.read_namespaced_secret(name, namespace).data or {}
    except ApiException as exc:
        what = "does not exist" if exc.status == 404 else f"cannot be read ({exc.status} {exc.reason})"
        raise PipelineFailed(f"Secret {namespace}/{name} {what} ({FIELD})") from None
    missing = [k for k in TLS_FILES if k not in data]
    if missing:
        raise PipelineFailed(f"Secret {namespace}/{name} has no {', '.join(missing)} ({FIELD})")
    credentials = Credentials.from_secret_body(data)
    wrong = tls_problems(credentials)
    if wrong:
        raise SpecError(f"ftpipeline {namespace}/{body['metadata']['name']}",
                        [Problem(FIELD, f"Secret {name}: {w}") for w in wrong])
    return credentials
