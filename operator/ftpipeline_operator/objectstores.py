"""A pipeline's own keys to the operator's object store, and the buckets its ``s3://`` locations name.

A pipeline whose checkpoints or Parquet sinks are at ``s3://`` URIs and
that names no store of its own (``spec.objectStore``) uses the operator's:
the chart's in-cluster S3 gateway (``objectStore.enabled``). Only the
operator holds that store's root keys. Before each run it makes sure the
pipeline has

- a user of its own on the store (``embedded/s3.py``: ``GatewayAdmin``),
  whose keys are kept in the Secret ``<name>-object-store`` in the
  pipeline's namespace (created on the first run, read on later ones, owned
  by the FTPipeline and deleted with it; the user is deleted by the
  deletion handler), and which both worker containers read as the standard
  ``AWS_*`` variables (``render.object_store_env``);
- every bucket its locations name, owned by that user. A bucket another
  pipeline owns is refused, naming the field: the gateway lets a user into
  its own buckets alone, so one pipeline's keys never reach another's data.

A pipeline with ``spec.objectStore.secretRef`` brings its own store and
keys; the operator issues nothing for it. One with ``s3://`` locations and
neither is refused before any pod starts, naming ``spec.objectStore``.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes import client

from ftpipeline.embedded.s3 import REGION, BucketTaken, GatewayAdmin
from ftpipeline.objectstore.base import split_uri
from ftpipeline.spec.load import Problem, SpecError
from ftpipeline.spec.model import PipelineSpec
from ftpipeline_operator import render
from ftpipeline_operator.stores import put_secret, read_data

log = logging.getLogger("ftpipeline.operator.objectstores")


@dataclass(frozen=True)
class OperatorStore:
    """The operator's object store: where pipelines reach it, and the root keys its admin API takes."""

    endpoint: str
    access_key: str
    secret_key: str

    def admin(self) -> GatewayAdmin:
        return GatewayAdmin(self.endpoint, self.access_key, self.secret_key)


def user_of(namespace: str, name: str) -> str:
    """The pipeline's user on the store: named by its namespace and name, as a claim is, so a pipeline deleted and
    created again gets its buckets back (what a fresh run does with output already there is its sinks'
    ``existingOutput``); a pipeline of another name or namespace never does."""
    return "ftp-" + hashlib.sha256(f"{namespace}/{name}".encode()).hexdigest()[:20]


def uses_operator_store(body: Mapping[str, Any], spec: PipelineSpec) -> bool:
    return bool(spec.object_store_uris) and not (body["spec"].get("objectStore") or {}).get("secretRef")


def issue(core: client.CoreV1Api, body: Mapping[str, Any], spec: PipelineSpec, store: OperatorStore | None) -> str | None:
    """The name of the Secret holding the pipeline's keys to the operator's store, once its user and buckets are in
    place; None when the pipeline does not use the operator's store."""
    if not uses_operator_store(body, spec):
        return None
    field, uri = spec.object_store_fields[0]
    source = f"ftpipeline {body['metadata']['namespace']}/{body['metadata']['name']}"
    if store is None:  # a spec that cannot run as it is: refused at once, not retried (SpecError)
        raise SpecError(source, [Problem(field, f"{uri} is on an object store, but spec.objectStore names none and "
                                                f"the operator has none of its own (the chart's objectStore.enabled)")])
    namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
    secret_name = render.object_store_secret_name(name)
    data = read_data(core, namespace, secret_name) or {}
    user = user_of(namespace, name)
    wanted = {"AWS_ACCESS_KEY_ID": user, "AWS_SECRET_ACCESS_KEY": data.get("AWS_SECRET_ACCESS_KEY") or
              secrets.token_urlsafe(30), "AWS_ENDPOINT_URL": store.endpoint, "AWS_REGION": REGION,
              "FTPIPELINE_S3_PATH_STYLE": "true"}
    admin = store.admin()
    admin.ensure_user(user, wanted["AWS_SECRET_ACCESS_KEY"])
    for field, uri in spec.object_store_fields:
        bucket = split_uri(uri)[0]
        try:
            admin.ensure_bucket(bucket, user)
        except BucketTaken:
            raise SpecError(source, [Problem(field, f"bucket {bucket!r} belongs to another pipeline on the "
                                                    f"operator's object store; choose another bucket")]) from None
    if wanted != data:
        put_secret(core, object_store_secret(body, wanted))
    log.info("pipeline object store user granted", extra={"pipeline": f"{namespace}/{name}", "user": user,
                                                           "buckets": sorted({split_uri(u)[0] for u in spec.object_store_uris})})
    return secret_name


def revoke(store: OperatorStore, namespace: str, name: str) -> None:
    """Delete the pipeline's user: its keys stop working; its buckets and their data stay, owned by its name (a
    pipeline created again under it is given them back)."""
    store.admin().delete_user(user_of(namespace, name))


def object_store_secret(body: Mapping[str, Any], data: Mapping[str, str]) -> render.Obj:
    """The pipeline's keys to the operator's object store, owned by the FTPipeline."""
    import base64

    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": render.object_meta(body, render.object_store_secret_name(body["metadata"]["name"]),
                                           "object-store-credentials"),
            "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}}
