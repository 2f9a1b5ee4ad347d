"""A keyed-function stage in a pipeline document: what it becomes, and what it may not say, refused before
anything runs with the field named (the class checked against the entry point)."""

from __future__ import annotations

import copy
import importlib.util
from pathlib import Path
from typing import Any

import pytest
import yaml

from ftpipeline.dataflow.graph import Graph
from ftpipeline.spec.load import SpecError, entry_problems, parse_pipeline
from ftpipeline.spec.model import Partition

DOC: dict[str, Any] = {
    "apiVersion": "ftpipeline.io/v1alpha1", "kind": "FTPipeline", "metadata": {"name": "cards"},
    "spec": {"entryPoint": "rules.py", "workers": 1, "stages": [
        {"name": "payments", "source": {"file": {"path": "in", "format": "jsonl", "rowsPerStep": 10,
                                                 "schema": {"card": "string", "ts": "long"}},
                                        "eventTime": {"column": "ts"}}},
        {"name": "rule", "inputs": [{"stage": "payments"}],
         "process": {"class": "Rule", "keys": ["card"], "output": {"card": "string", "at": "timestamp"}}},
        {"name": "out", "inputs": [{"stage": "rule"}], "sink": {"parquet": {"path": "out"}}},
    ]},
}


def parse(doc: dict[str, Any], base: Path = Path("/p")) -> Any:
    return parse_pipeline(yaml.safe_dump(doc, sort_keys=False), base, source="t.yaml", check_entry_point=False)


def test_a_keyed_function_becomes_its_model_hashed_on_its_keys() -> None:
    spec = parse(copy.deepcopy(DOC))
    stage = spec.stage("rule")
    assert (stage.process.class_name, stage.process.keys, stage.process.output, stage.process.rows) == \
        ("Rule", ("card",), (("card", "string"), ("at", "timestamp")), "arrow")
    assert [(e.partition, e.keys) for e in stage.inputs] == [(Partition.HASH, ("card",))]
    graph = Graph.physical(spec)
    assert graph.is_stateful("rule") and graph.on_processing_time("rule") and spec.processing_time


@pytest.mark.parametrize(("field", "value", "path", "words"), [
    ("keys", ["user"], "spec.stages[1].process.keys[0]", "'user' is not a column of 'payments'"),
    ("output", {"card": "int"}, "spec.stages[1].process.output.card", "must be one of"),
    ("rows", "polars", "spec.stages[1].process.rows", "must be one of arrow, pandas"),
    ("initialState", {"delta": {"path": "a"}, "parquet": {"path": "b"}}, "spec.stages[1].process.initialState",
     "exactly one of delta, parquet"),
])
def test_what_a_keyed_function_cannot_run_with_is_refused_naming_the_field(field: str, value: Any, path: str,
                                                                           words: str) -> None:
    doc = copy.deepcopy(DOC)
    doc["spec"]["stages"][1]["process"][field] = value
    with pytest.raises(SpecError) as info:
        parse(doc)
    found = [(p.path, p.message) for p in info.value.problems]
    assert any(p == path and words in m for p, m in found), found


def test_the_class_is_checked_against_the_entry_point(tmp_path: Path) -> None:
    (tmp_path / "rules.py").write_text("class Rule:\n    pass\n\nclass Other:\n    def process(self, k, r, c):\n"
                                       "        return None\n")
    doc = copy.deepcopy(DOC)
    doc["spec"]["stages"][1]["process"]["rows"] = "pandas"
    problems = [(p.path, p.message) for p in entry_problems(parse(doc, tmp_path))]
    assert ("spec.stages[1].process.class", "'rules.py' has no class 'Rule' with a process(key, rows, ctx) method") \
        in problems
    if importlib.util.find_spec("pandas") is None:
        assert any(p == "spec.stages[1].process.rows" and "pandas is not installed" in m for p, m in problems)
    doc["spec"]["stages"][1]["process"].update({"class": "Other", "rows": "arrow"})
    assert entry_problems(parse(doc, tmp_path)) == []


def test_an_initial_state_is_a_table_the_class_takes_with_init_state(tmp_path: Path) -> None:
    (tmp_path / "rules.py").write_text("class Rule:\n    def process(self, k, r, c):\n        return None\n\n"
                                       "class Seeded(Rule):\n    def init_state(self, k, r, c):\n        pass\n")
    doc = copy.deepcopy(DOC)
    doc["spec"]["stages"][1]["process"]["initialState"] = {"delta": {"path": "seed"}}
    spec = parse(doc, tmp_path)
    assert (spec.stage("rule").process.initial_delta, spec.stage("rule").process.initial_parquet) == \
        (tmp_path / "seed", None)
    assert [(p.path, p.message) for p in entry_problems(spec)] == [
        ("spec.stages[1].process.initialState", "class 'Rule' has no init_state(key, rows, ctx) method to take it")]
    doc["spec"]["stages"][1]["process"].update({"class": "Seeded", "initialState": {"parquet": {"path": "s3://b/s"}}})
    spec = parse(doc, tmp_path)
    assert spec.stage("rule").process.initial_parquet == "s3://b/s" and entry_problems(spec) == []
