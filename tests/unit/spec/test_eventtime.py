"""Event time in a pipeline document: what a window or a source's eventTime may say, refused before
anything runs with the field named, and what the model gets."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from ftpipeline.spec.durations import micros, text
from ftpipeline.spec.load import SpecError, parse_pipeline

DOC: dict[str, Any] = {
    "apiVersion": "ftpipeline.io/v1alpha1", "kind": "FTPipeline", "metadata": {"name": "views"},
    "spec": {"entryPoint": "pages.py", "workers": 1, "stages": [
        {"name": "views", "source": {
            "file": {"path": "in", "format": "jsonl", "rowsPerStep": 10,
                     "schema": {"page": "string", "ts": "long", "who": "string"}},
            "eventTime": {"column": "ts", "watermark": {"maxOutOfOrderness": "10s"}, "idleTimeout": "1m"}}},
        {"name": "per-minute", "inputs": [{"stage": "views"}], "aggregate": {
            "keyBy": ["page"], "aggregations": [{"name": "n", "op": "count"}, {"name": "a", "op": "avg", "column": "ts"}],
            "window": {"tumbling": {"size": "1m"}, "lateData": {"path": "late"}}}},
        {"name": "out", "inputs": [{"stage": "per-minute"}], "sink": {"parquet": {"path": "out"}}},
    ]},
}


def parse(doc: dict[str, Any]) -> Any:
    return parse_pipeline(yaml.safe_dump(doc), Path("/p"), source="t.yaml", check_entry_point=False)


def problems(doc: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(SpecError) as info:
        parse(doc)
    return [(p.path, p.message) for p in info.value.problems]


def test_a_windowed_pipeline_becomes_its_model() -> None:
    spec = parse(copy.deepcopy(DOC))
    event = spec.stage("views").event_time
    assert (event.column, event.max_out_of_orderness_us, event.idle_timeout_us) == ("ts", 10_000_000, 60_000_000)
    window = spec.stage("per-minute").aggregate.window
    assert (window.kind, window.size_us, window.slide_us, window.time_column, window.emit) == \
        ("tumbling", 60_000_000, 60_000_000, "ts", "append")
    assert window.late_data == Path("/p/late") and spec.event_time


def test_late_records_may_go_to_a_kafka_topic_instead() -> None:
    doc = copy.deepcopy(DOC)
    doc["spec"]["stages"][1]["aggregate"]["window"]["lateData"] = {"topic": "late-views"}
    spec = parse(doc)
    stage = spec.stage("per-minute")
    assert (stage.late_data, stage.late_topic, spec.uses_kafka) == (None, "late-views", True)


def test_a_session_window_becomes_its_model() -> None:
    doc = copy.deepcopy(DOC)
    doc["spec"]["stages"][1]["aggregate"]["window"] = {"session": {"gap": "30m"}, "emit": "update"}
    window = parse(doc).stage("per-minute").aggregate.window
    assert (window.kind, window.gap_us, window.emit) == ("session", 1_800_000_000, "update")


def edited(change: Any) -> dict[str, Any]:
    doc = copy.deepcopy(DOC)
    change(doc["spec"]["stages"])
    return doc


@pytest.mark.parametrize("change, path, words", [
    (lambda s: s[0]["source"].pop("eventTime"), "spec.stages[1].aggregate.window", "no source upstream"),
    (lambda s: s[0]["source"]["eventTime"].update(column="when"), "spec.stages[0].source.eventTime.column",
     "'when' is not a column"),
    (lambda s: s[0]["source"]["eventTime"].update(column="who"), "spec.stages[0].source.eventTime.column",
     "'who' is string"),
    (lambda s: s[0]["source"]["eventTime"].update(recordTimestamp=True),
     "spec.stages[0].source.eventTime.recordTimestamp", "only a Kafka source"),
    (lambda s: s[1]["aggregate"].pop("window"), "spec.stages[1].aggregate.aggregations[1].op", "avg needs a window"),
    (lambda s: s[1]["aggregate"].update(ttl={"steps": 3}), "spec.stages[1].aggregate.ttl", "leaves with the watermark"),
    (lambda s: s[1]["aggregate"]["window"].update(tumbling=None, sliding={"size": "1m", "slide": "25s"}),
     "spec.stages[1].aggregate.window.sliding.slide", "divide size"),
    (lambda s: s[1]["aggregate"]["window"].update(tumbling={"size": "0s"}),
     "spec.stages[1].aggregate.window.tumbling.size", "above 0"),
    (lambda s: s[1]["aggregate"]["window"].update(tumbling={"size": "1 minute"}),
     "spec.stages[1].aggregate.window.tumbling.size", "not a duration: a whole number and a unit"),
    (lambda s: s[1]["aggregate"]["window"].update(tumbling=None, session={"gap": "0s"}),
     "spec.stages[1].aggregate.window.session.gap", "above 0"),
    (lambda s: s[1]["aggregate"]["window"].update(session={"gap": "5m"}),
     "spec.stages[1].aggregate.window", "exactly one of"),
    (lambda s: s[1]["aggregate"]["window"]["lateData"].update(topic="late"),
     "spec.stages[1].aggregate.window.lateData", "exactly one of path, topic"),
    (lambda s: s[1]["aggregate"]["window"].update(lateData={"topic": "late views"}),
     "spec.stages[1].aggregate.window.lateData.topic", "does not match"),
])
def test_what_a_window_cannot_run_with_is_refused_naming_the_field(change: Any, path: str, words: str) -> None:
    def apply(stages: list[dict[str, Any]]) -> None:
        change(stages)
        window = stages[1]["aggregate"].get("window", {})
        if window.get("tumbling", 1) is None:
            del window["tumbling"]
    found = problems(edited(apply))
    assert any(p == path and words in m for p, m in found), found


def test_durations_read_and_write_in_the_units_people_use() -> None:
    assert [micros(t) for t in ("250ms", "10s", "1m", "30min", "2h", "1d")] == \
        [250_000, 10_000_000, 60_000_000, 1_800_000_000, 7_200_000_000, 86_400_000_000]
    assert [text(micros(t)) for t in ("90s", "30min", "1500ms")] == ["90s", "30m", "1500ms"]
    with pytest.raises(ValueError, match="not a duration"):
        micros("ten seconds")


def test_a_deduplication_becomes_its_model_and_needs_event_time() -> None:
    doc = copy.deepcopy(DOC)
    doc["spec"]["stages"].insert(1, {"name": "unique", "inputs": [{"stage": "views"}],
                                     "deduplicate": {"keys": ["who", "page"], "within": "30s"}})
    doc["spec"]["stages"][2]["inputs"] = [{"stage": "unique"}]
    spec = parse(doc)
    op = spec.stage("unique").deduplicate
    assert (op.keys, op.within_us, op.time_column, op.late_data) == (("who", "page"), 30_000_000, "ts", None)
    assert spec.stage("unique").inputs[0].partition.value == "hash" and spec.stage("unique").inputs[0].keys == op.keys
    doc["spec"]["stages"][0]["source"].pop("eventTime")
    doc["spec"]["stages"][2]["aggregate"].pop("window")
    doc["spec"]["stages"][2]["aggregate"]["aggregations"].pop()
    assert ("spec.stages[1].deduplicate", "no source upstream declares eventTime, so no watermark would ever "
                                          "move") in problems(doc)


def test_a_window_whose_output_would_repeat_a_column_is_refused_naming_the_field() -> None:
    """A window's output is its keys, window_start, window_end and one column per aggregation: a key named after
    a bound (a window fed by a window, keyed on the first one's start), or an aggregation named as a key or a
    bound, would repeat a column."""
    doc = copy.deepcopy(DOC)
    doc["spec"]["stages"][0]["source"]["file"]["schema"]["window_start"] = "long"
    window = doc["spec"]["stages"][1]["aggregate"]
    window["keyBy"] = ["page", "window_start"]
    window["aggregations"] = [{"name": "page", "op": "count"}, {"name": "window_end", "op": "count"}]
    found = problems(doc)
    assert ("spec.stages[1].aggregate.keyBy[1]", "'window_start' is the name of the window's own start in its "
            "output: rename it upstream") in found
    assert {p for p, _ in found} >= {"spec.stages[1].aggregate.aggregations[0].name",
                                     "spec.stages[1].aggregate.aggregations[1].name"}
