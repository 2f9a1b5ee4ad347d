"""Where a pipeline's last stable spec is kept: a ConfigMap the pipeline owns, named in its status.

A rollback (``upgrades.py``) runs the newest spec that committed a step,
so the operator must keep that spec across its own restarts. Kept whole in
the status, it doubled the length of ``kubectl describe`` and rode along in
every status patch. The status now only names it (``status.stableSpec``: a
digest, the generation it was, the ConfigMap), and the spec itself is the
``spec.json`` of ``<pipeline>-stable-spec``, written before the status
names it and deleted with the pipeline (its owner). A status written by an
older operator (``status.lastStableSpec``) is still read, and cleared at
the next commit.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any, cast

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from ftpipeline.obs.errors import one_line
from ftpipeline_operator.render import object_meta
from ftpipeline_operator.upgrades import spec_digest

log = logging.getLogger("ftpipeline.operator.stable")
KEY = "spec.json"


def config_map_name(pipeline: str) -> str:
    return f"{pipeline}-stable-spec"


def status_fields(body: Mapping[str, Any], digest: str) -> dict[str, Any]:
    """What the status says of the stable spec (and the older whole copy removed)."""
    return {"stableSpec": {"digest": digest, "generation": body["metadata"].get("generation"),
                           "configMap": config_map_name(body["metadata"]["name"])},
            "lastStableSpec": None}


def write(core: client.CoreV1Api, body: Mapping[str, Any], spec: Mapping[str, Any]) -> bool:
    """The stable spec into its ConfigMap (created, or its data and owner replaced). False, with a log line, when
    it could not be written: this operator still knows the spec, and the status keeps naming the one before."""
    name = config_map_name(body["metadata"]["name"])
    data = {KEY: json.dumps(spec, sort_keys=True)}
    namespace = body["metadata"]["namespace"]
    meta = object_meta(body, name, "stable-spec")
    try:
        try:
            core.create_namespaced_config_map(namespace, cast(Any, {
                "apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}))
        except ApiException as exc:
            if exc.status != 409:
                raise
            core.patch_namespaced_config_map(name, namespace, {  # one left by a namesake is this pipeline's now
                "metadata": {"labels": meta["labels"], "ownerReferences": meta["ownerReferences"]}, "data": data})
        return True
    except Exception as exc:  # the API server refused or is out of reach: the run goes on
        log.warning("the stable spec was not written", extra={"pipeline": body["metadata"]["name"],
                                                              "config_map": name, "error": one_line(exc)})
        return False


def read(core: client.CoreV1Api | None, body: Mapping[str, Any]) -> dict[str, Any] | None:
    """The stable spec the status names; None when it names none, or its ConfigMap is gone or holds another
    spec than the status names (a log line). (The whole copy an older operator left in the status is read by
    ``Upgrades`` itself.)"""
    named = (body.get("status") or {}).get("stableSpec") or {}
    if not named or core is None:
        return None
    name, pipeline = config_map_name(body["metadata"]["name"]), body["metadata"]["name"]
    try:
        found = core.read_namespaced_config_map(name, body["metadata"]["namespace"])
        spec = json.loads((found.data or {})[KEY])
    except Exception as exc:  # refused, out of reach, or not a spec: no rollback target rather than a wrong one
        log.warning("the stable spec cannot be read: no rollback until a spec commits a step again",
                    extra={"pipeline": pipeline, "config_map": name, "error": one_line(exc)})
        return None
    if spec_digest(spec) != named.get("digest"):
        log.warning("the stable spec's ConfigMap holds another spec than the status names: not used",
                    extra={"pipeline": pipeline, "config_map": name})
        return None
    return dict(spec)
