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

celpy builds its LALR parser tables once per process (~0.3 s), and every
process that loads a spec pays that at its start — a resumed ``ftpipeline
run`` before it can take its workers over, each CLI command, the webhook.
Lark can keep the analysed grammar in a file, checked against the grammar's
digest when loaded; ``_parser`` builds celpy's one parser with that file in
the user's cache directory (when it is writable and celpy is the version
whose parser options are mirrored there; else celpy builds it as usual).
"""

from __future__ import annotations

import importlib.metadata
import os
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import celpy
import lark
from celpy.adapter import json_to_cel
from celpy.celparser import CELParser

PARSER_OPTIONS_OF = "0.5.0"  # the cel-python whose CELParser options _parser mirrors


def _cache_file() -> Path | None:
    # embedded/jars.py's cache_root, written out: spec/ and embedded/ are independent layers (.importlinter)
    where = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ftpipeline"
    try:
        where.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return where / f"cel-{PARSER_OPTIONS_OF}-lark-{lark.__version__}.grammar" if os.access(where, os.W_OK) else None


@cache
def _parser() -> None:
    """celpy's shared parser (``CELParser.CEL_PARSER``), built from the cached tables where it can be."""
    if CELParser.CEL_PARSER is not None or importlib.metadata.version("cel-python") != PARSER_OPTIONS_OF:
        return
    cached = _cache_file()
    if cached is None:
        return
    CELParser.CEL_PARSER = lark.Lark(
        (Path(celpy.__file__).parent / "cel.lark").read_text(), parser="lalr", start="expr", debug=True,
        g_regex_flags=re.M, lexer_callbacks={"IDENT": CELParser.ambiguous_literals}, propagate_positions=True,
        maybe_placeholders=False, priority="invert", tree_class=lark.Tree, cache=str(cached))

Rule = dict[str, str]


@cache
def _program(rule: str) -> Any:
    _parser()
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
