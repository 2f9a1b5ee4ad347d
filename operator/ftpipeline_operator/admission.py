"""The validating webhook: the API server asks the operator before it stores an FTPipeline.

The CRD's schema and CEL rules decide what they can express (types, bounds,
unique stage names, inputs naming a stage). Two things they cannot:

- the dataflow as a graph: a cycle needs recursion, which CEL has not, and
  the loader's other dataflow checks (a sink read as an input, forward
  partitioning across unequal parallelism, the size bounds) are cheaper to
  keep in one place than to write twice;
- the installation's policy (``policy.py``): which volume types and service
  accounts a pipeline may give its pods is chosen in the chart's values, so
  it is not a property of the CRD.

So the webhook runs the same checks ``ftpipeline run`` runs before a run
(``spec.load.document_problems``; not the entry point's import, which needs
the image) plus the policy, and refuses the object with every problem named
as ``spec.<field>: <what>``. What needs other objects (a Secret that does
not exist) or the image stays with the operator, which reports it as a
Failed phase with a condition and an Event.

An update that leaves ``spec`` as it was is always allowed: Kopf's own
finalizer and annotations must go through even for an object stored
before the policy tightened, or deleting it would hang.

Serving: a process of its own beside the operator in its pod
(``webhook.py``), so a review never waits behind the operator's
coordinators. The chart renders the ValidatingWebhookConfiguration (so
uninstalling removes it) pointing at the operator's Service, with
``failurePolicy: Fail``. The operator issues itself a certificate for that
Service's names and writes its CA into the configuration's ``caBundle``.
Several replicas sit behind that Service, and the API server trusts one
``caBundle``: so the certificate is kept in a Secret
(``FTPIPELINE_WEBHOOK_SECRET``, namespace/name) that the first replica to
start creates and every other one reads (:func:`shared_credentials`).
"""

from __future__ import annotations

import base64
import logging
import os
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, cast

import kopf
from kubernetes import client

from ftpipeline.spec.load import Problem, document_problems
from ftpipeline.spec.schema import API_GROUP, API_VERSION, KIND
from ftpipeline.worker import tls
from ftpipeline_operator import owners
from ftpipeline_operator.policy import Policy
from ftpipeline_operator.policy import problems as policy_problems

log = logging.getLogger("ftpipeline.operator.admission")
WEBHOOK_ID = "validate"  # Kopf serves the handler at /<id>: the chart's webhook path
DEFAULT_PORT = 8443
POLICY = Policy.from_env()


def review(new: Mapping[str, Any], old: Mapping[str, Any] | None, policy: Policy) -> list[Problem]:
    """What is wrong with storing ``new`` (``old``: the stored object of an update)."""
    if old is not None and old.get("spec") == new.get("spec"):
        return []
    meta = new.get("metadata") or {}
    doc = {"apiVersion": new.get("apiVersion", f"{API_GROUP}/{API_VERSION}"), "kind": new.get("kind", KIND),
           "metadata": {"name": meta.get("name", meta.get("generateName", ""))}, "spec": new.get("spec")}
    found = document_problems(doc)
    if isinstance(new.get("spec"), Mapping):
        found += policy_problems(new["spec"], policy)
    return found


def validate(body: kopf.Body, **kwargs: Any) -> None:
    """The handler ``webhook.py`` registers: refuses ``body`` naming every problem."""
    found = review(body, kwargs.get("old"), POLICY)  # ``old``: the stored object, on an update
    if found:
        where = f"{body.get('metadata', {}).get('namespace', '')}/{body.get('metadata', {}).get('name', '')}"
        log.info("refused at admission", extra={"pipeline": where, "problems": [str(p) for p in found]})
        raise kopf.AdmissionError("; ".join(map(str, found)), code=422)


def service_names(service: str) -> tuple[str, ...]:
    """The names the API server checks the webhook's certificate against (``name.namespace`` given)."""
    if not service:
        return ("localhost",)
    name, _, namespace = service.partition(".")
    return (f"{name}.{namespace}.svc", f"{name}.{namespace}.svc.cluster.local", f"{name}.{namespace}")


def configure(settings: kopf.OperatorSettings) -> None:
    """Serve the webhook under a certificate issued now, and publish its CA to the configuration the
    chart names (``FTPIPELINE_WEBHOOK_SERVICE``: name.namespace; ``FTPIPELINE_WEBHOOK_CONFIGURATION``)."""
    names = service_names(os.environ.get("FTPIPELINE_WEBHOOK_SERVICE", ""))
    secret = os.environ.get("FTPIPELINE_WEBHOOK_SECRET", "")
    credentials = (shared_credentials(client.CoreV1Api(), secret, lambda: tls.generate("ftpipeline webhook", names),
                                      owners.release_deployment())
                   if secret else tls.generate("ftpipeline webhook", names))
    directory = credentials.write(Path(tempfile.mkdtemp(prefix="ftpipeline-webhook-")))
    settings.admission.server = kopf.WebhookServer(
        port=int(os.environ.get("FTPIPELINE_WEBHOOK_PORT", DEFAULT_PORT)),
        certfile=str(directory / "tls.crt"), pkeyfile=str(directory / "tls.key"), cadata=credentials.ca)
    settings.admission.managed = None  # the chart owns the configuration; only its caBundle is ours
    name = os.environ.get("FTPIPELINE_WEBHOOK_CONFIGURATION", "")
    if name:
        publish_ca(client.AdmissionregistrationV1Api(), name, credentials.ca)


def shared_credentials(core: client.CoreV1Api, where: str, generate: Callable[[], tls.Credentials],
                       owner: dict[str, Any] | None = None) -> tls.Credentials:
    """The webhook's certificate in the Secret ``where`` (namespace/name): read, or generated and created
    when there is none; of two replicas that create it at once, the one refused reads the other's."""
    namespace, _, name = where.partition("/")
    for _ in range(3):
        try:
            data = core.read_namespaced_secret(name, namespace).data or {}
            return tls.Credentials.from_secret_body(data)
        except client.exceptions.ApiException as exc:
            if exc.status != 404:
                raise
        fresh = generate()
        body = {"metadata": {"name": name, "namespace": namespace,
                             "labels": {"app.kubernetes.io/managed-by": "ftpipeline-operator"},
                             "ownerReferences": [owner] if owner is not None else []},
                "type": "Opaque",
                "data": fresh.as_secret_body()}
        try:
            core.create_namespaced_secret(namespace, cast(client.V1Secret, body))
            log.info("webhook certificate created", extra={"secret": where})
            return fresh
        except client.exceptions.ApiException as exc:
            if exc.status != 409:
                raise
    raise RuntimeError(f"Secret {where}: neither readable nor creatable")


def publish_ca(api: client.AdmissionregistrationV1Api, name: str, ca: bytes) -> None:
    """Write ``ca`` into every webhook of the configuration ``name``."""
    current = api.read_validating_webhook_configuration(name)
    bundle = base64.b64encode(ca).decode("ascii")
    patch = [{"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": bundle}
             for i in range(len(current.webhooks or []))]
    api.patch_validating_webhook_configuration(name, patch)
    log.info("webhook CA published", extra={"configuration": name, "webhooks": len(patch)})
