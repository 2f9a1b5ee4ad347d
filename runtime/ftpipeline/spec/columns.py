"""Columns a pipeline names against an upstream whose columns the document itself fixes.

A hash edge's ``keys``, an aggregate's ``keyBy`` and the columns it totals,
and a join's ``keys`` must be columns of what flows in. For most stages only the code says which
columns those are (a generator's rows, a transform's result), and the run
reports a wrong name. Three kinds of stage fix them in the document: a file
or Kafka source with a ``schema``, a raw Kafka source (its fixed columns), and
an aggregate (its keys and its totals). Names
checked against those are refused before anything runs, at admission
included, naming the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# The columns of a Kafka source of format raw, as Spark's Kafka source names them.
RAW_KAFKA_COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp")


def _columns(stage: Mapping[str, Any]) -> set[str] | None:
    """The columns a stage emits when the document alone says (a file source's schema, an aggregate's keys and
    totals); None when only its code does (a generator, a transform)."""
    if "process" in stage:
        return set(stage["process"]["output"])
    if "aggregate" in stage:
        agg = stage["aggregate"]
        windows = ("window_start", "window_end") if "window" in agg else ()
        return {*agg["keyBy"], *windows, *(a["name"] for a in agg["aggregations"])}
    source = stage.get("source") or {}
    stamped = {source["eventTime"]["column"]} if source.get("eventTime", {}).get("recordTimestamp") else set()
    if source.get("kafka", {}).get("format") == "raw":
        return set(RAW_KAFKA_COLUMNS) | stamped
    schema = source.get("file", source.get("kafka", {})).get("schema")
    return set(schema) | stamped if schema else None


def column_problems(stages: list[Mapping[str, Any]], index: Mapping[str, int]) -> list[tuple[str, str]]:
    """Columns named against an upstream whose columns the document fixes: hash keys, an aggregate's keyBy and
    the columns it aggregates. Anything fed by user code is left to the run."""
    problems: list[tuple[str, str]] = []
    for i, raw in enumerate(stages):
        known: list[tuple[str, set[str]]] = []
        for j, edge in enumerate(raw.get("inputs", [])):
            columns = _columns(stages[index[edge["stage"]]])
            if columns is None:
                known = []
                break
            known.append((edge["stage"], columns))
            for k, key in enumerate(edge.get("keys", [])):
                if key not in columns:
                    problems.append((f"spec.stages[{i}].inputs[{j}].keys[{k}]",
                                     f"{key!r} is not a column of {edge['stage']!r} (its columns: "
                                     f"{', '.join(sorted(columns))})"))
        if "process" in raw:
            for k, key in enumerate(raw["process"]["keys"]):
                for upstream, columns in known:
                    if key not in columns:
                        problems.append((f"spec.stages[{i}].process.keys[{k}]", f"{key!r} is not a column of "
                                         f"{upstream!r} (its columns: {', '.join(sorted(columns))})"))
        if "join" in raw:
            for k, key in enumerate(raw["join"]["keys"]):
                for j, edge in enumerate(raw["inputs"]):
                    columns = _columns(stages[index[edge["stage"]]])
                    if columns is not None and key not in columns:
                        problems.append((f"spec.stages[{i}].join.keys[{k}]",
                                         f"{key!r} is not a column of {edge['stage']!r}, input {j} (its columns: "
                                         f"{', '.join(sorted(columns))})"))
        if "aggregate" not in raw or not known:
            continue
        named = [(f"keyBy[{k}]", c) for k, c in enumerate(raw["aggregate"]["keyBy"])]
        named += [(f"aggregations[{k}].column", a["column"]) for k, a in enumerate(raw["aggregate"]["aggregations"])
                  if a.get("column")]
        for where, column in named:
            for upstream, columns in known:
                if column not in columns:
                    problems.append((f"spec.stages[{i}].aggregate.{where}",
                                     f"{column!r} is not a column of {upstream!r} (its columns: "
                                     f"{', '.join(sorted(columns))})"))
    return problems
