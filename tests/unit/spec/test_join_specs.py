"""Join stages in a pipeline document (two streams joined, a stream joined to a table): what they become, and
what they may not say, refused before anything runs with the field named."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml

from ftpipeline.dataflow.graph import Graph
from ftpipeline.spec.load import SpecError, parse_pipeline
from ftpipeline.spec.model import Partition


def source(schema: dict[str, str], event: bool = True) -> dict[str, Any]:
    return {"file": {"path": "in", "format": "jsonl", "rowsPerStep": 10, "schema": schema},
            **({"eventTime": {"column": "ts"}} if event else {})}


DOC: dict[str, Any] = {
    "apiVersion": "ftpipeline.io/v1alpha1", "kind": "FTPipeline", "metadata": {"name": "ads"},
    "spec": {"entryPoint": "ads.py", "workers": 1, "stages": [
        {"name": "views", "source": source({"ad": "string", "ts": "long"})},
        {"name": "clicks", "source": source({"ad": "string", "ts": "long", "cost": "long"})},
        {"name": "clicked", "parallelism": 2, "inputs": [{"stage": "views"}, {"stage": "clicks"}],
         "join": {"type": "left", "keys": ["ad"], "within": {"lower": "-1m", "upper": "10m"},
                  "lateData": {"path": "late"}}},
        {"name": "out", "parallelism": 2, "inputs": [{"stage": "clicked"}], "sink": {"parquet": {"path": "out"}}},
    ]},
}


def parse(doc: dict[str, Any]) -> Any:
    return parse_pipeline(yaml.safe_dump(doc), Path("/p"), source="t.yaml", check_entry_point=False)


def test_a_join_becomes_its_model_and_hashes_both_inputs_on_its_keys() -> None:
    spec = parse(copy.deepcopy(DOC))
    stage = spec.stage("clicked")
    op = stage.join
    assert (op.kind, op.keys, op.left, op.right, op.lower_us, op.upper_us, op.left_time, op.right_time) == \
        ("left", ("ad",), "views", "clicks", -60_000_000, 600_000_000, "ts", "ts")
    assert stage.late_data == Path("/p/late") and stage.late_field == "join.lateData"
    assert [(e.partition, e.keys) for e in stage.inputs] == [(Partition.HASH, ("ad",))] * 2
    graph = Graph.physical(spec)
    assert graph.is_stateful("clicked") and graph.on_event_time("clicked")


def _inputs(n: int) -> Callable[[dict[str, Any]], None]:
    def change(doc: dict[str, Any]) -> None:
        doc["spec"]["stages"][2]["inputs"] = [{"stage": "views"}, {"stage": "clicks"}, {"stage": "views"}][:n]
    return change


def _set(path: list[Any], value: Any) -> Callable[[dict[str, Any]], None]:
    def change(doc: dict[str, Any]) -> None:
        at = doc["spec"]["stages"]
        for p in path[:-1]:
            at = at[p]
        at[path[-1]] = value
    return change


@pytest.mark.parametrize(("change", "path", "words"), [
    (_inputs(1), "spec.stages[2].inputs", "a join has two inputs, the left then the right; got 1"),
    (_inputs(3), "spec.stages[2].inputs", "got 3"),
    (_set([2, "inputs", 1, "stage"], "views"), "spec.stages[2].inputs[1].stage", "two stages"),
    (_set([2, "join", "within"], {"lower": "5m", "upper": "1m"}), "spec.stages[2].join.within", "lower is after upper"),
    (_set([2, "join", "within", "upper"], "10 minutes"), "spec.stages[2].join.within.upper", "does not match"),
    (_set([2, "join", "type"], "cross"), "spec.stages[2].join.type", "must be one of inner, left, right, full"),
    (_set([2, "join", "keys"], ["user"]), "spec.stages[2].join.keys[0]", "'user' is not a column of 'views'"),
    (_set([1, "source"], source({"ad": "string", "ts": "long"}, event=False)), "spec.stages[2].inputs[1]",
     "no source upstream of 'clicks' declares eventTime"),
])
def test_what_a_join_cannot_run_with_is_refused_naming_the_field(change: Any, path: str, words: str) -> None:
    doc = copy.deepcopy(DOC)
    change(doc)
    with pytest.raises(SpecError) as info:
        parse(doc)
    found = [(p.path, p.message) for p in info.value.problems]
    assert any(p == path and words in m for p, m in found), found


LOOKUP: dict[str, Any] = {
    "apiVersion": "ftpipeline.io/v1alpha1", "kind": "FTPipeline", "metadata": {"name": "ads"},
    "spec": {"entryPoint": "ads.py", "workers": 1, "stages": [
        {"name": "clicks", "source": source({"ad": "string", "ts": "long"}, event=False)},
        {"name": "priced", "inputs": [{"stage": "clicks"}],
         "lookup": {"table": {"delta": {"path": "ads"}}, "keys": ["ad"], "type": "left"}},
        {"name": "out", "inputs": [{"stage": "priced"}], "sink": {"parquet": {"path": "out"}}},
    ]},
}


def test_a_lookup_becomes_its_model_and_records_its_tables_version_with_each_step() -> None:
    spec = parse(copy.deepcopy(LOOKUP))
    op = spec.stage("priced").lookup
    assert (op.kind, op.keys, op.delta, op.parquet, op.path) == ("left", ("ad",), Path("/p/ads"), None, Path("/p/ads"))
    assert [s.name for s in spec.lookups] == ["priced"] and not Graph.physical(spec).is_stateful("priced")


def test_a_lookup_of_a_compacted_topic_names_the_topic_and_its_columns_and_uses_kafka() -> None:
    doc = copy.deepcopy(LOOKUP)
    doc["spec"]["stages"][1]["lookup"]["table"] = {"kafka": {"topic": "ads", "schema": {"ad": "string", "bid": "long"}}}
    spec = parse(doc)
    op = spec.stage("priced").lookup
    assert op.kafka is not None and (op.kafka.topic, op.kafka.schema) == ("ads", (("ad", "string"), ("bid", "long")))
    assert op.delta is None and op.parquet is None and spec.uses_kafka and not spec.reads_kafka


@pytest.mark.parametrize(("table", "path", "words"), [
    ({"delta": {"path": "a"}, "parquet": {"path": "b"}}, "spec.stages[1].lookup.table",
     "exactly one of delta, parquet, kafka"),
    ({}, "spec.stages[1].lookup.table", "exactly one of delta, parquet, kafka"),
    ({"iceberg": {"path": "a"}}, "spec.stages[1].lookup.table.iceberg", "unknown field"),
    ({"kafka": {"topic": "ads"}}, "spec.stages[1].lookup.table.kafka.schema", "required"),
    ({"kafka": {"topic": "ads", "schema": {"id": "string"}}}, "spec.stages[1].lookup.keys[0]",
     "'ad' is not a column of the table's schema"),
    ({"kafka": {"topic": "ads", "schema": {"ad": "timestamp"}}}, "spec.stages[1].lookup.table.kafka.schema.ad",
     "must be one of"),
])
def test_what_a_lookup_cannot_read_is_refused_naming_the_field(table: dict[str, Any], path: str, words: str) -> None:
    doc = copy.deepcopy(LOOKUP)
    doc["spec"]["stages"][1]["lookup"]["table"] = table
    with pytest.raises(SpecError) as info:
        parse(doc)
    found = [(p.path, p.message) for p in info.value.problems]
    assert any(p == path and words in m for p, m in found), found
