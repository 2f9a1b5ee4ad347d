"""The building blocks of the FTPipeline schema (``schema.py``): typed nodes in the structural subset of
JSON Schema that both the API server and local validation accept, and the references shared by stages and
the spec."""

from __future__ import annotations

from typing import Any

from ftpipeline.spec.cel import Rule, rule

Schema = dict[str, Any]

# DNS-1123 label: safe in pod names, Redis keys and object names (no dots).
NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
# A Python identifier: the name of a function in the entry point module.
FUNCTION_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"


def obj(description: str, properties: Schema, required: list[str] | None = None,
         rules: list[Rule] | None = None) -> Schema:
    node: Schema = {
        "type": "object",
        "description": description,
        "additionalProperties": False,
        "properties": properties,
    }
    if required:
        node["required"] = required
    if rules:
        node["x-kubernetes-validations"] = rules
    return node


def boolean(description: str, default: bool) -> Schema:
    return {"type": "boolean", "description": description, "default": default}


def one_of(*fields: str) -> Rule:
    present = ", ".join(f"has(self.{f})" for f in fields)
    return rule(f"[{present}].filter(x, x).size() == 1", f"needs exactly one of {', '.join(fields)}")


def either(a: str, b: str) -> Rule:
    return rule(f"!(has(self.{a}) && has(self.{b}))", f"set {a} or {b}, not both")


def integer(description: str, minimum: int | None = None, default: int | None = None) -> Schema:
    node: Schema = {"type": "integer", "description": description}
    if minimum is not None:
        node["minimum"] = minimum
    if default is not None:
        node["default"] = default
    return node


def string(description: str, **extra: Any) -> Schema:
    return {"type": "string", "description": description, **extra}


SECRET_REF = obj(
    "A key of a Secret in the pipeline's namespace.",
    {"name": string("Secret name.", minLength=1), "key": string("Key within the Secret.", minLength=1)},
    ["name", "key"],
)

QUANTITIES = {
    "type": "object",
    "description": "Resource name (cpu, memory) to quantity.",
    "additionalProperties": {"x-kubernetes-int-or-string": True,
                             "anyOf": [{"type": "integer"}, {"type": "string"}]},
}

RESOURCES = obj(
    "Compute resources of the container, as in a Pod (ignored by ftpipeline run).",
    {"requests": QUANTITIES, "limits": QUANTITIES},
)
