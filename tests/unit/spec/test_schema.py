"""The FTPipeline JSON Schema stays a Kubernetes *structural* schema (it becomes the CRD)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import jsonschema
import pytest

from ftpipeline.spec.crd import crd
from ftpipeline.spec.schema import FTPIPELINE_SCHEMA, STAGE_SCHEMA

# Keywords that hold sub-schemas, and how to reach them.
_SINGLE = ("items", "additionalProperties", "not")
_LISTS = ("allOf", "anyOf", "oneOf")


def walk(node: dict[str, Any], path: str = "$") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every schema node with a JSONPath-like location."""
    yield path, node
    for name, child in node.get("properties", {}).items():
        yield from walk(child, f"{path}.properties.{name}")
    for key in _SINGLE:
        child = node.get(key)
        if isinstance(child, dict):
            yield from walk(child, f"{path}.{key}")
    for key in _LISTS:
        for i, child in enumerate(node.get(key, [])):
            yield from walk(child, f"{path}.{key}[{i}]")


def properties(node: dict[str, Any], path: str = "$") -> Iterator[tuple[str, dict[str, Any]]]:
    for where, n in walk(node, path):
        for name, child in n.get("properties", {}).items():
            yield f"{where}.properties.{name}", child


NODES = list(walk(FTPIPELINE_SCHEMA))


def test_walk_reaches_deep_nodes() -> None:
    """Guards the walker itself: if it stopped descending, every other test would pass vacuously."""
    paths = {p for p, _ in NODES}
    assert "$.properties.spec.properties.stages.items.properties.aggregate.properties.aggregations.items" in paths
    assert "$.properties.spec.properties.stages.items.properties.source.properties.file.properties.schema.additionalProperties" in paths
    assert len(NODES) > 60


def int_or_string(node: dict[str, Any]) -> bool:
    """Kubernetes' one exception to typed nodes: quantities such as 500m or 2Gi, or 2."""
    return node.get("x-kubernetes-int-or-string") is True and node.get("anyOf") == [{"type": "integer"},
                                                                                       {"type": "string"}]


def test_every_node_has_a_type() -> None:
    untyped = [p for p, n in NODES if "type" not in n and not int_or_string(n) and not p.endswith("anyOf[0]")
               and not p.endswith("anyOf[1]")]
    assert untyped == []
    assert any(int_or_string(n) for _, n in NODES)


def test_types_are_single_strings() -> None:
    unions = [p for p, n in NODES if "type" in n and not isinstance(n["type"], str)]
    assert unions == []


def test_no_refs() -> None:
    assert [p for p, n in NODES if "$ref" in n or "$defs" in n or "definitions" in n] == []


@pytest.mark.parametrize("keyword", ["oneOf", "anyOf"])
def test_unions_never_change_the_type(keyword: str) -> None:
    """Structural schemas allow oneOf/anyOf only as value validation under an already typed node."""
    for path, node in NODES:
        if int_or_string(node):
            continue
        for i, branch in enumerate(node.get(keyword, [])):
            assert branch.get("type", node["type"]) == node["type"], f"{path}.{keyword}[{i}]"


def test_every_object_node_has_a_description() -> None:
    missing = [p for p, n in NODES if n.get("type") == "object" and not n.get("description")]
    assert missing == []


def test_every_property_has_a_description() -> None:
    missing = [p for p, n in properties(FTPIPELINE_SCHEMA) if not n.get("description")]
    assert missing == []


def test_arrays_have_typed_items() -> None:
    for path, node in NODES:
        if node.get("type") == "array":
            assert isinstance(node.get("items"), dict) and "type" in node["items"], path


def test_required_fields_are_declared_properties() -> None:
    for path, node in NODES:
        for name in node.get("required", []):
            assert name in node.get("properties", {}), f"{path}: required {name!r} is not a property"


def test_defaults_are_valid_for_their_node() -> None:
    for path, node in NODES:
        if "default" in node:
            assert list(jsonschema.Draft202012Validator(node).iter_errors(node["default"])) == [], path


def test_schema_is_a_valid_json_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(FTPIPELINE_SCHEMA)


def test_stage_schema_is_the_one_used_for_stages() -> None:
    assert FTPIPELINE_SCHEMA["properties"]["spec"]["properties"]["stages"]["items"] is STAGE_SCHEMA


def test_crd_schema_never_combines_properties_and_additional_properties() -> None:
    schema = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    both = [p for p, n in walk(schema) if "properties" in n and "additionalProperties" in n]
    assert both == []
