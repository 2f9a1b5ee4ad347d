"""The schema's CEL rules (``x-kubernetes-validations``), evaluated locally.

Cross-field constraints — one stage kind, a URL *or* a Secret, a backoff
whose ceiling is not below its start — are written once, as CEL rules in
the schema. ``ftpipeline run``, ``ftpipeline validate`` and the operator's
admission webhook evaluate them with cel-python (the CRD the API server
holds carries none: ``spec/crd.py``), so a document is refused with the same
message on every path, before anything starts.

Rules are written for documents without defaults applied (``has()`` guards
every optional field), because the API server applies defaults first and
the local loader does not.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import cache
from typing import Any

import celpy
from celpy.adapter import json_to_cel

Rule = dict[str, str]


@cache
def _program(rule: str) -> Any:
    env = celpy.Environment()
    return env.program(env.compile(rule))


def rule(expression: str, message: str) -> Rule:
    return {"rule": expression, "message": message}


def violations(schema: dict[str, Any], value: Any, path: tuple[str | int, ...] = ()) -> Iterator[
        tuple[tuple[str | int, ...], str]]:
    """Each (path, message) of a rule ``value`` breaks, depth first; rules of a node whose
    own shape is wrong are for the structural schema to report, so assume the shape is right."""
    for r in schema.get("x-kubernetes-validations", ()):
        if not bool(_program(r["rule"]).evaluate({"self": json_to_cel(value)})):
            yield path, r["message"]
    if isinstance(value, dict):
        props = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        for key, child in value.items():
            sub = props.get(key, extra if isinstance(extra, dict) else None)
            if sub is not None:
                yield from violations(sub, child, (*path, key))
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, child in enumerate(value):
            yield from violations(schema["items"], child, (*path, i))
