"""Columns named against an upstream whose columns the document fixes are checked before anything runs."""

from __future__ import annotations

from typing import Any

from ftpipeline.spec.columns import column_problems

FILES = {"name": "events", "source": {"file": {"path": "in", "format": "jsonl", "rowsPerStep": 10,
                                               "schema": {"user": "string", "amount": "long"}}}}
GENERATED = {"name": "gen", "source": {"generator": {"function": "g", "rowsPerStep": 10}}}


def _aggregate(upstream: str, key: str, column: str, keys: list[str] | None = None) -> dict[str, Any]:
    edge: dict[str, Any] = {"stage": upstream}
    if keys is not None:
        edge.update(partition="hash", keys=keys)
    return {"name": "totals", "inputs": [edge],
            "aggregate": {"keyBy": [key], "aggregations": [{"name": "sum", "op": "sum", "column": column}]}}


def _check(*stages: dict[str, Any]) -> list[tuple[str, str]]:
    return column_problems(list(stages), {s["name"]: i for i, s in enumerate(stages)})


def test_names_that_are_columns_of_a_schema_pass() -> None:
    assert _check(FILES, _aggregate("events", "user", "amount", keys=["user"])) == []


def test_a_key_a_keyby_and_a_total_that_are_not_columns_are_each_named() -> None:
    found = dict(_check(FILES, _aggregate("events", "usr", "amont", keys=["uid"])))
    assert set(found) == {"spec.stages[1].inputs[0].keys[0]", "spec.stages[1].aggregate.keyBy[0]",
                          "spec.stages[1].aggregate.aggregations[0].column"}
    assert "'usr' is not a column of 'events' (its columns: amount, user)" == found["spec.stages[1].aggregate.keyBy[0]"]


def test_an_aggregates_own_columns_are_its_keys_and_totals() -> None:
    downstream = {"name": "again", "inputs": [{"stage": "totals", "partition": "hash", "keys": ["sum", "amount"]}],
                  "transform": {"function": "f"}}
    found = _check(FILES, _aggregate("events", "user", "amount"), downstream)
    assert [path for path, _ in found] == ["spec.stages[2].inputs[0].keys[1]"]


def test_what_user_code_produces_is_left_to_the_run() -> None:
    assert _check(GENERATED, _aggregate("gen", "anything", "whatever", keys=["nope"])) == []
