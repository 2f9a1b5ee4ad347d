"""The pipeline loader: schema, dataflow and entry-point checks with field paths; defaults and paths."""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from ftpipeline.spec.load import Problem, SpecError, load_pipeline, parse_pipeline
from ftpipeline.spec.schema import DEFAULT_CHECKPOINT_STEPS
from ftpipeline.spec.model import (
    AggregateOp,
    Aggregation,
    Edge,
    Partition,
    PipelineSpec,
    StageKind,
    Trigger,
)

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "clickstream" / "pipeline.yaml"

BASE: dict[str, Any] = {
    "apiVersion": "ftpipeline.io/v1alpha1",
    "kind": "FTPipeline",
    "metadata": {"name": "clickstream"},
    "spec": {
        "image": "ftpipeline:0.1.0",
        "entryPoint": "fns.py",
        "workers": 3,
        "stages": [
            {
                "name": "events",
                "parallelism": 3,
                "source": {"generator": {"function": "generate_events", "rowsPerStep": 300, "seed": 7}},
            },
            {
                "name": "clean",
                "parallelism": 3,
                "inputs": [{"stage": "events"}],
                "transform": {"function": "clean_events"},
            },
            {
                "name": "per-user",
                "parallelism": 3,
                "inputs": [{"stage": "clean"}],
                "aggregate": {
                    "keyBy": ["user_id"],
                    "aggregations": [
                        {"name": "events", "op": "count"},
                        {"name": "clicks", "op": "sum", "column": "is_click"},
                    ],
                },
            },
            {
                "name": "output",
                "parallelism": 3,
                "inputs": [{"stage": "per-user"}],
                "sink": {"parquet": {"path": "out/per-user"}},
            },
        ],
    },
}

GOOD_MODULE = """
def generate_events(ctx):
    return None

def clean_events(df):
    return df
"""

STAGE_FIELDS = "aggregate, deduplicate, inputs, join, lookup, name, parallelism, process, sink, source, transform"


@pytest.fixture(autouse=True)
def _isolate_imports(monkeypatch: pytest.MonkeyPatch):
    """Entry points are imported into sys.modules and put on sys.path: undo both after each test."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    before = set(sys.modules)
    yield
    for name in set(sys.modules) - before:
        if name.startswith("ftpipeline_entry_"):
            del sys.modules[name]


def base() -> dict[str, Any]:
    return copy.deepcopy(BASE)


def stages(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return doc["spec"]["stages"]


def parse(doc: Any, base_dir: Path = Path("/pipelines"), check_entry_point: bool = False) -> PipelineSpec:
    return parse_pipeline(yaml.safe_dump(doc), base_dir, source="test.yaml", check_entry_point=check_entry_point)


def problems(doc: Any, **kwargs: Any) -> list[Problem]:
    with pytest.raises(SpecError) as info:
        parse(doc, **kwargs)
    assert info.value.source == "test.yaml"
    assert info.value.problems, "a SpecError must name at least one problem"
    return list(info.value.problems)


def only_problem(doc: Any, **kwargs: Any) -> Problem:
    found = problems(doc, **kwargs)
    assert len(found) == 1, found
    return found[0]


# -- a valid document -------------------------------------------------------------


def test_base_document_is_valid() -> None:
    spec = parse(base())
    assert spec.name == "clickstream"
    assert spec.image == "ftpipeline:0.1.0"
    assert spec.entry_point == "fns.py"
    assert spec.workers == 3
    assert [s.name for s in spec.stages] == ["events", "clean", "per-user", "output"]
    assert [s.kind for s in spec.stages] == [StageKind.SOURCE, StageKind.TRANSFORM, StageKind.AGGREGATE, StageKind.SINK]
    assert spec.stage("events").generator is not None
    assert spec.stage("events").generator.function == "generate_events"
    assert spec.stage("events").generator.rows_per_step == 300
    assert spec.stage("events").generator.seed == 7
    assert spec.stage("clean").function == "clean_events"
    assert spec.stage("clean").inputs == (Edge("events", "clean", Partition.FORWARD),)
    assert spec.stage("per-user").aggregate == AggregateOp(
        ("user_id",), (Aggregation("events", "count"), Aggregation("clicks", "sum", "is_click"))
    )


def test_defaults_applied() -> None:
    spec = parse(base())
    assert spec.fault_tolerance is True
    assert spec.mode == "lockstep"
    assert spec.max_steps is None
    assert spec.trigger == Trigger(records=1, timer_ms=100, tick_ms=0)
    assert spec.recovery_strategy == "lineage"
    assert spec.gc_interval_ms == 500
    assert spec.redis_url is None
    assert spec.spark_master == ""  # local[the worker's cores]: spec/cores.py
    assert spec.spark_conf == ()
    assert spec.dead_letter is None


def test_defaults_fill_only_missing_fields() -> None:
    doc = base()
    doc["spec"]["steps"] = {"maxSteps": 5, "trigger": {"records": 50}}
    doc["spec"]["spark"] = {"conf": {"spark.b": "2", "spark.a": "1"}}
    doc["spec"]["faultTolerance"] = False
    spec = parse(doc)
    assert spec.max_steps == 5
    assert spec.trigger == Trigger(records=50, timer_ms=100, tick_ms=0)
    assert spec.spark_master == ""
    assert spec.spark_conf == (("spark.a", "1"), ("spark.b", "2"))
    assert spec.fault_tolerance is False


def test_stage_parallelism_defaults_to_one() -> None:
    doc = base()
    for stage in stages(doc):
        del stage["parallelism"]
    spec = parse(doc)
    assert [s.parallelism for s in spec.stages] == [1, 1, 1, 1]


def test_aggregate_input_defaults_to_hash_on_key_by() -> None:
    spec = parse(base())
    assert spec.stage("per-user").inputs == (Edge("clean", "per-user", Partition.HASH, ("user_id",)),)


def test_aggregate_input_defaults_to_hash_even_when_parallelism_differs() -> None:
    doc = base()
    stages(doc)[2]["parallelism"] = 2
    stages(doc)[3]["parallelism"] = 2
    spec = parse(doc)
    assert spec.stage("per-user").inputs == (Edge("clean", "per-user", Partition.HASH, ("user_id",)),)


def test_explicit_partition_and_keys_are_kept() -> None:
    doc = base()
    stages(doc)[1]["parallelism"] = 2
    stages(doc)[1]["inputs"] = [{"stage": "events", "partition": "hash", "keys": ["user_id", "page"]}]
    spec = parse(doc)
    assert spec.stage("clean").inputs == (Edge("events", "clean", Partition.HASH, ("user_id", "page")),)


# -- pass 1: the structural schema ---------------------------------------------


def test_unknown_top_level_field() -> None:
    doc = base()
    doc["colour"] = "blue"
    p = only_problem(doc)
    assert p.path == "colour"
    assert p.message == "unknown field (allowed: apiVersion, kind, metadata, spec)"


def test_unknown_spec_field_lists_allowed_fields() -> None:
    doc = base()
    doc["spec"]["replicas"] = 3
    p = only_problem(doc)
    assert p.path == "spec.replicas"
    assert p.message.startswith("unknown field (allowed: ")
    for allowed in ("deadLetter", "entryPoint", "image", "stages", "workers"):
        assert allowed in p.message


def test_unknown_stage_field_lists_allowed_fields() -> None:
    doc = base()
    stages(doc)[2]["window"] = "5m"
    p = only_problem(doc)
    assert p.path == "spec.stages[2].window"
    assert p.message == f"unknown field (allowed: {STAGE_FIELDS})"


def test_wrong_type() -> None:
    doc = base()
    doc["spec"]["workers"] = "three"
    p = only_problem(doc)
    assert p.path == "spec.workers"
    assert p.message == "must be an integer, got 'three'"


def test_below_minimum() -> None:
    doc = base()
    doc["spec"]["workers"] = 0
    p = only_problem(doc)
    assert p.path == "spec.workers"
    assert p.message == "must be >= 1, got 0"


def test_stage_parallelism_below_minimum() -> None:
    doc = base()
    stages(doc)[1]["parallelism"] = 0
    p = only_problem(doc)
    assert p.path == "spec.stages[1].parallelism"
    assert "must be >= 1" in p.message


@pytest.mark.parametrize(
    ("edit", "path", "allowed", "bad"),
    [
        (lambda d: d["spec"].update(steps={"mode": "async"}), "spec.steps.mode", "lockstep, pipelined", "async"),
        (lambda d: d["spec"].update(recovery={"strategy": "restart"}), "spec.recovery.strategy",
         "lineage, checkpoint, auto", "restart"),
        (
            lambda d: d["spec"]["stages"][1]["inputs"][0].update(partition="random"),
            "spec.stages[1].inputs[0].partition",
            "forward, hash, broadcast",
            "random",
        ),
        (
            lambda d: d["spec"]["stages"][2]["aggregate"]["aggregations"][1].update(op="median"),
            "spec.stages[2].aggregate.aggregations[1].op",
            "count, sum, min, max, avg, first, last, countDistinct",
            "median",
        ),
        (
            lambda d: d["spec"]["stages"][0].update(
                source={"file": {"path": "in", "format": "xml", "rowsPerStep": 10}}
            ),
            "spec.stages[0].source.file.format",
            "jsonl, csv, parquet",
            "xml",
        ),
    ],
    ids=["steps.mode", "recovery.strategy", "partition", "aggregation-op", "file-format"],
)
def test_unknown_enum_value(edit, path: str, allowed: str, bad: str) -> None:
    doc = base()
    edit(doc)
    p = only_problem(doc)
    assert p.path == path
    assert p.message == f"must be one of {allowed}; got {bad!r}"


@pytest.mark.parametrize(
    ("remove", "path"),
    [
        (lambda d: d["spec"].pop("workers"), "spec.workers"),
        (lambda d: d["spec"].pop("entryPoint"), "spec.entryPoint"),
        (lambda d: d["spec"].pop("stages"), "spec.stages"),
        (lambda d: d["metadata"].pop("name"), "metadata.name"),
        (lambda d: d.pop("spec"), "spec"),
    ],
    ids=["workers", "entryPoint", "stages", "metadata.name", "spec"],
)
def test_missing_required_field(remove, path: str) -> None:
    doc = base()
    remove(doc)
    p = only_problem(doc)
    assert p.path == path
    assert p.message == "required field is missing"


def test_invalid_stage_name_pattern() -> None:
    doc = base()
    stages(doc)[3]["name"] = "Out.Put"
    p = only_problem(doc)
    assert p.path == "spec.stages[3].name"
    assert "'Out.Put' does not match" in p.message


def test_several_problems_reported_at_once() -> None:
    doc = base()
    doc["spec"]["workers"] = 0
    doc["spec"]["steps"] = {"mode": "async"}
    stages(doc)[1]["window"] = "5m"
    del doc["spec"]["entryPoint"]
    found = problems(doc)
    assert sorted(p.path for p in found) == sorted(
        ["spec.workers", "spec.steps.mode", "spec.stages[1].window", "spec.entryPoint"]
    )


def test_spec_error_message_lists_every_problem() -> None:
    doc = base()
    doc["spec"]["workers"] = 0
    doc["spec"]["replicas"] = 2
    with pytest.raises(SpecError) as info:
        parse(doc)
    text = str(info.value)
    assert text.startswith("invalid pipeline test.yaml:")
    assert "  - spec.workers: must be >= 1, got 0" in text
    assert "  - spec.replicas: unknown field" in text


def test_schema_problems_stop_the_dataflow_pass() -> None:
    doc = base()
    doc["spec"]["workers"] = 0
    stages(doc)[1]["inputs"] = [{"stage": "nope"}]  # a dataflow problem, not reported yet
    assert [p.path for p in problems(doc)] == ["spec.workers"]


# -- pass 2: the dataflow -------------------------------------------------------


def test_stage_with_two_kinds() -> None:
    doc = base()
    stages(doc)[3]["transform"] = {"function": "clean_events"}
    p = only_problem(doc)
    assert p.path == "spec.stages[3]"
    assert p.message == "needs exactly one of source, transform, aggregate, deduplicate, join, process, lookup, sink"


def test_stage_with_no_kind() -> None:
    doc = base()
    del stages(doc)[1]["transform"]
    p = only_problem(doc)
    assert p.path == "spec.stages[1]"
    assert p.message == "needs exactly one of source, transform, aggregate, deduplicate, join, process, lookup, sink"


def test_source_with_two_inputs_kinds() -> None:
    doc = base()
    stages(doc)[0]["source"]["file"] = {"path": "in", "format": "parquet", "rowsPerStep": 10}
    p = only_problem(doc)
    assert p.path == "spec.stages[0].source"
    assert p.message == "needs exactly one of generator, file, kafka"


def test_source_with_inputs() -> None:
    doc = base()
    stages(doc)[0]["inputs"] = [{"stage": "clean"}]
    p = only_problem(doc)
    assert p.path == "spec.stages[0].inputs"
    assert p.message == "a source has no inputs"


@pytest.mark.parametrize("inputs", [None, []], ids=["absent", "empty"])
def test_transform_without_inputs(inputs) -> None:
    doc = base()
    if inputs is None:
        del stages(doc)[1]["inputs"]
    else:
        stages(doc)[1]["inputs"] = inputs
    p = only_problem(doc)
    assert p.path == "spec.stages[1].inputs"
    assert p.message == "a transform needs at least one input"


def test_unknown_input_stage() -> None:
    doc = base()
    stages(doc)[1]["inputs"] = [{"stage": "evnts"}]
    p = only_problem(doc)
    assert p.path == "spec.stages[1].inputs[0].stage"
    assert p.message == "unknown stage 'evnts' (known: events, clean, per-user, output)"


def test_unknown_input_stage_second_input() -> None:
    doc = base()
    stages(doc)[1]["inputs"].append({"stage": "ghost"})
    p = only_problem(doc)
    assert p.path == "spec.stages[1].inputs[1].stage"
    assert "'ghost'" in p.message


def test_input_from_a_sink() -> None:
    doc = base()
    stages(doc).append(
        {"name": "after", "parallelism": 3, "inputs": [{"stage": "output"}], "transform": {"function": "clean_events"}}
    )
    p = only_problem(doc)
    assert p.path == "spec.stages[4].inputs[0].stage"
    assert p.message == "'output' is a sink and has no output"


def test_duplicate_stage_names() -> None:
    doc = base()
    stages(doc).append(copy.deepcopy(stages(doc)[3]))
    p = only_problem(doc)
    assert p.path == "spec.stages[4].name"
    assert p.message == "duplicate stage name 'output' (also spec.stages[3])"


def _assert_cycle(p: Problem, doc: dict[str, Any], members: set[str]) -> None:
    assert p.message.startswith("cycle: ")
    path = p.message.removeprefix("cycle: ").split(" -> ")
    assert path[0] == path[-1], path
    assert set(path) == members
    assert len(path) == len(members) + 1
    inputs = {s["name"]: [e["stage"] for e in s.get("inputs", [])] for s in stages(doc)}
    for here, there in zip(path, path[1:]):
        assert there in inputs[here], f"{here} -> {there} is not an edge"
    first = [s["name"] for s in stages(doc)].index(path[0])
    assert p.path == f"spec.stages[{first}].inputs"


def _cyclic(*transforms: tuple[str, list[str]]) -> dict[str, Any]:
    doc = base()
    src, sink = stages(doc)[0], stages(doc)[3]
    middle = [
        {"name": name, "parallelism": 3, "inputs": [{"stage": i} for i in ins], "transform": {"function": "clean_events"}}
        for name, ins in transforms
    ]
    sink["inputs"] = [{"stage": transforms[-1][0]}]
    doc["spec"]["stages"] = [src, *middle, sink]
    return doc


def test_two_stage_cycle() -> None:
    doc = _cyclic(("a", ["events", "b"]), ("b", ["a"]))
    p = only_problem(doc)
    _assert_cycle(p, doc, {"a", "b"})
    assert p.message == "cycle: a -> b -> a"


def test_three_stage_cycle() -> None:
    doc = _cyclic(("a", ["events", "c"]), ("b", ["a"]), ("c", ["b"]))
    _assert_cycle(only_problem(doc), doc, {"a", "b", "c"})


def test_cycle_path_leaves_out_the_stages_leading_into_it() -> None:
    doc = _cyclic(("a", ["events", "b"]), ("b", ["a"]))
    sink = stages(doc).pop()
    stages(doc).insert(1, sink)  # visited first: output -> b -> a -> b
    p = only_problem(doc)
    _assert_cycle(p, doc, {"a", "b"})
    assert p.message == "cycle: b -> a -> b"


def test_self_loop_is_a_cycle() -> None:
    doc = _cyclic(("a", ["events", "a"]),)
    p = only_problem(doc)
    assert p.path == "spec.stages[1].inputs"
    assert p.message == "cycle: a -> a"


def test_forward_with_unequal_parallelism() -> None:
    doc = base()
    stages(doc)[1]["parallelism"] = 2
    stages(doc)[1]["inputs"] = [{"stage": "events", "partition": "forward"}]
    p = only_problem(doc)
    assert p.path == "spec.stages[1].inputs[0].partition"
    assert p.message == "forward needs equal parallelism (events: 3, clean: 2)"


def test_hash_without_keys() -> None:
    doc = base()
    stages(doc)[1]["inputs"] = [{"stage": "events", "partition": "hash"}]
    p = only_problem(doc)
    assert p.path == "spec.stages[1].inputs[0].keys"
    assert p.message == "hash partitioning needs keys"


def test_hash_with_empty_keys() -> None:
    doc = base()
    stages(doc)[1]["inputs"] = [{"stage": "events", "partition": "hash", "keys": []}]
    assert only_problem(doc).path == "spec.stages[1].inputs[0].keys"


def test_missing_partition_when_parallelism_differs() -> None:
    doc = base()
    stages(doc)[1]["parallelism"] = 2
    p = only_problem(doc)
    assert p.path == "spec.stages[1].inputs[0].partition"
    assert p.message == "required when parallelism differs (events: 3, clean: 2)"


def test_broadcast_allows_unequal_parallelism() -> None:
    doc = base()
    stages(doc)[1]["parallelism"] = 5
    stages(doc)[1]["inputs"] = [{"stage": "events", "partition": "broadcast"}]
    spec = parse(doc)
    assert spec.stage("clean").inputs == (Edge("events", "clean", Partition.BROADCAST),)


def test_aggregation_without_column() -> None:
    doc = base()
    del stages(doc)[2]["aggregate"]["aggregations"][1]["column"]
    p = only_problem(doc)
    assert p.path == "spec.stages[2].aggregate.aggregations[1].column"
    assert p.message == "required for op sum"


def test_count_needs_no_column() -> None:
    spec = parse(base())
    assert spec.stage("per-user").aggregate is not None
    assert spec.stage("per-user").aggregate.aggregations[0] == Aggregation("events", "count", None)


def test_no_sink() -> None:
    doc = base()
    del stages(doc)[3]
    p = only_problem(doc)
    assert p.path == "spec.stages"
    assert p.message == "needs at least one sink"


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_text_file_source_without_schema(fmt: str) -> None:
    doc = base()
    stages(doc)[0]["source"] = {"file": {"path": "in", "format": fmt, "rowsPerStep": 10}}
    p = only_problem(doc)
    assert p.path == "spec.stages[0].source.file.schema"
    assert p.message == f"required for format {fmt}"


def test_parquet_file_source_needs_no_schema() -> None:
    doc = base()
    stages(doc)[0]["source"] = {"file": {"path": "in", "format": "parquet", "rowsPerStep": 10}}
    spec = parse(doc)
    assert spec.stage("events").file is not None
    assert spec.stage("events").file.format == "parquet"
    assert spec.stage("events").file.schema == ()


# -- pass 3: the entry point ------------------------------------------------------


def test_entry_point_with_every_function_passes(tmp_path: Path) -> None:
    (tmp_path / "fns.py").write_text(GOOD_MODULE)
    spec = parse(base(), base_dir=tmp_path, check_entry_point=True)
    assert spec.base_dir == tmp_path.resolve()


def test_entry_point_file_missing(tmp_path: Path) -> None:
    p = only_problem(base(), base_dir=tmp_path, check_entry_point=True)
    assert p.path == "spec.entryPoint"
    assert p.message.startswith("cannot import 'fns.py': FileNotFoundError")
    assert str(tmp_path.resolve() / "fns.py") in p.message


def test_entry_point_that_raises_on_import(tmp_path: Path) -> None:
    (tmp_path / "fns.py").write_text('raise RuntimeError("no database configured")\n')
    p = only_problem(base(), base_dir=tmp_path, check_entry_point=True)
    assert p.path == "spec.entryPoint"
    assert p.message == "cannot import 'fns.py': RuntimeError: no database configured"


def test_entry_point_that_raises_on_import_fails_every_time(tmp_path: Path) -> None:
    (tmp_path / "fns.py").write_text('raise RuntimeError("no database configured")\n')
    first = only_problem(base(), base_dir=tmp_path, check_entry_point=True)
    second = problems(base(), base_dir=tmp_path, check_entry_point=True)
    assert [p.path for p in second] == [first.path] == ["spec.entryPoint"]


def test_entry_point_missing_transform_function(tmp_path: Path) -> None:
    (tmp_path / "fns.py").write_text("def generate_events(ctx):\n    return None\n")
    p = only_problem(base(), base_dir=tmp_path, check_entry_point=True)
    assert p.path == "spec.stages[1].transform.function"
    assert p.message == "'fns.py' has no function 'clean_events'"


def test_entry_point_missing_generator_function(tmp_path: Path) -> None:
    (tmp_path / "fns.py").write_text("def clean_events(df):\n    return df\n")
    p = only_problem(base(), base_dir=tmp_path, check_entry_point=True)
    assert p.path == "spec.stages[0].source.generator.function"
    assert p.message == "'fns.py' has no function 'generate_events'"


def test_entry_point_name_that_is_not_callable(tmp_path: Path) -> None:
    (tmp_path / "fns.py").write_text("def generate_events(ctx):\n    return None\n\nclean_events = 3\n")
    assert only_problem(base(), base_dir=tmp_path, check_entry_point=True).path == "spec.stages[1].transform.function"


def test_entry_point_reports_every_missing_function(tmp_path: Path) -> None:
    (tmp_path / "fns.py").write_text("x = 1\n")
    found = problems(base(), base_dir=tmp_path, check_entry_point=True)
    assert [p.path for p in found] == [
        "spec.stages[0].source.generator.function",
        "spec.stages[1].transform.function",
    ]


def test_entry_point_is_not_checked_when_disabled(tmp_path: Path) -> None:
    spec = parse(base(), base_dir=tmp_path, check_entry_point=False)  # fns.py does not exist
    assert spec.entry_point == "fns.py"


def test_entry_point_relative_to_base_dir(tmp_path: Path) -> None:
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "fns.py").write_text(GOOD_MODULE)
    doc = base()
    doc["spec"]["entryPoint"] = "code/fns.py"
    parse(doc, base_dir=tmp_path, check_entry_point=True)
    doc["spec"]["entryPoint"] = "fns.py"
    assert only_problem(doc, base_dir=tmp_path, check_entry_point=True).path == "spec.entryPoint"


# -- the text itself ------------------------------------------------------------


def test_invalid_yaml() -> None:
    with pytest.raises(SpecError) as info:
        parse_pipeline("spec: [unclosed\n", Path("/p"), source="bad.yaml", check_entry_point=False)
    (p,) = info.value.problems
    assert p.path == ""
    assert p.message.startswith("not valid YAML: ")
    assert str(p) == p.message  # no leading ": " without a path


@pytest.mark.parametrize("text", ["- a\n- b\n", "just a string\n", ""], ids=["list", "scalar", "empty"])
def test_yaml_that_is_not_a_mapping(text: str) -> None:
    with pytest.raises(SpecError) as info:
        parse_pipeline(text, Path("/p"), check_entry_point=False)
    (p,) = info.value.problems
    assert p.path == ""
    assert p.message == "expected a YAML mapping with apiVersion, kind, metadata, spec"


def test_problem_str_with_path() -> None:
    assert str(Problem("spec.workers", "must be >= 1, got 0")) == "spec.workers: must be >= 1, got 0"


# -- files and paths --------------------------------------------------------------


def _write(directory: Path, doc: dict[str, Any]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "pipeline.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_relative_paths_resolved_against_the_file_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    doc = base()
    stages(doc)[0]["source"] = {"file": {"path": "../data/in", "format": "parquet", "rowsPerStep": 10}}
    doc["spec"]["deadLetter"] = {"path": "dead"}
    path = _write(tmp_path / "pipes", doc)
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")  # resolved against the file, not the working directory
    spec = load_pipeline(path, check_entry_point=False)
    root = tmp_path.resolve()
    assert spec.base_dir == root / "pipes"
    assert spec.stage("output").sink is not None
    assert spec.stage("output").sink.path == root / "pipes" / "out" / "per-user"
    assert spec.stage("events").file is not None
    assert spec.stage("events").file.path == root / "data" / "in"
    assert spec.dead_letter == root / "pipes" / "dead"


def test_relative_file_path_argument(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _write(tmp_path / "pipes", base())
    monkeypatch.chdir(tmp_path)
    spec = load_pipeline("pipes/pipeline.yaml", check_entry_point=False)
    assert spec.stage("output").sink is not None
    assert spec.stage("output").sink.path == tmp_path.resolve() / "pipes" / "out" / "per-user"


def test_absolute_paths_are_kept(tmp_path: Path) -> None:
    doc = base()
    stages(doc)[3]["sink"]["parquet"]["path"] = "/srv/out"
    doc["spec"]["deadLetter"] = {"path": "/srv/dead"}
    spec = load_pipeline(_write(tmp_path, doc), check_entry_point=False)
    assert spec.stage("output").sink is not None
    assert spec.stage("output").sink.path == Path("/srv/out")
    assert spec.dead_letter == Path("/srv/dead")


def test_load_pipeline_checks_entry_point_next_to_the_file(tmp_path: Path) -> None:
    path = _write(tmp_path / "pipes", base())
    with pytest.raises(SpecError) as info:
        load_pipeline(path)
    assert info.value.source == str(path)
    assert [p.path for p in info.value.problems] == ["spec.entryPoint"]
    (tmp_path / "pipes" / "fns.py").write_text(GOOD_MODULE)
    assert load_pipeline(path).name == "clickstream"


def test_load_pipeline_keeps_the_source_text(tmp_path: Path) -> None:
    path = _write(tmp_path, base())
    assert load_pipeline(path, check_entry_point=False).source_text == path.read_text()


def test_load_pipeline_missing_file(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as info:
        load_pipeline(tmp_path / "nope.yaml")
    (p,) = info.value.problems
    assert p.path == ""
    assert p.message.startswith("cannot read: ")


# -- the shipped example -------------------------------------------------------------


def test_clickstream_example_loads() -> None:
    spec = load_pipeline(EXAMPLE)  # imports clickstream.py (pyspark is imported, no session is started)
    assert spec.name == "clickstream"
    assert spec.workers == 3
    assert spec.max_steps == 24
    assert [s.name for s in spec.stages] == ["events", "clean", "per-user", "output"]
    assert all(s.parallelism == 3 for s in spec.stages)
    assert spec.stage("per-user").inputs == (Edge("clean", "per-user", Partition.HASH, ("user_id",)),)
    assert spec.stage("per-user").aggregate is not None
    assert [a.op for a in spec.stage("per-user").aggregate.aggregations] == ["count", "sum", "sum", "sum", "min", "max"]
    assert spec.stage("output").sink is not None
    assert spec.stage("output").sink.path == EXAMPLE.parent / "out" / "per-user"


# -- the CEL rules, evaluated locally as the API server does ------------------


def test_backoff_ceiling_below_its_start() -> None:
    doc = base()
    doc["spec"]["recovery"] = {"backoff": {"initialMs": 5000, "maxMs": 1000}}
    p = only_problem(doc)
    assert (p.path, p.message) == ("spec.recovery.backoff", "maxMs must be at least initialMs")


def test_an_endpoint_and_a_secret_at_once() -> None:
    doc = base()
    doc["spec"]["redis"] = {"url": "redis://r", "secretRef": {"name": "s", "key": "url"}}
    p = only_problem(doc)
    assert (p.path, p.message) == ("spec.redis", "set url or secretRef, not both")


def test_checkpoint_recovery_without_checkpoints() -> None:
    doc = base()
    doc["spec"]["recovery"] = {"strategy": "checkpoint"}
    assert parse(doc).checkpoint_steps == DEFAULT_CHECKPOINT_STEPS  # the default interval serves
    message = ("recovery.strategy checkpoint needs checkpoints: checkpoint.intervalSteps or intervalMs above 0, "
               "or neither set (the default interval)")
    for off in ({"intervalSteps": 0}, {"intervalSteps": 0, "intervalMs": 0}):
        doc["spec"]["checkpoint"] = off
        p = only_problem(doc)
        assert (p.path, p.message) == ("spec", message)
    doc["spec"]["checkpoint"] = {"intervalSteps": 5}
    assert parse(doc).recovery_strategy == "checkpoint"
    doc["spec"]["checkpoint"] = {"intervalMs": 5000}
    assert parse(doc).recovery_strategy == "checkpoint"
    doc["spec"].pop("checkpoint")
    doc["spec"]["faultTolerance"] = False  # no default checkpoints without fault tolerance
    assert only_problem(doc).message == message


def test_a_fault_tolerant_pipeline_checkpoints_by_default() -> None:
    doc = base()
    spec = parse(doc)
    assert (spec.checkpoint_steps, spec.checkpoint_ms, spec.checkpoints_enabled) == (DEFAULT_CHECKPOINT_STEPS, 0, True)
    assert spec.unbounded_warning is None
    doc["spec"]["checkpoint"] = {"storage": {"path": "elsewhere"}}  # storage alone keeps the default interval
    assert parse(doc).checkpoint_steps == DEFAULT_CHECKPOINT_STEPS


def test_an_interval_by_time_alone_replaces_the_default_by_steps() -> None:
    doc = base()
    doc["spec"]["checkpoint"] = {"intervalMs": 30_000}
    spec = parse(doc)
    assert (spec.checkpoint_steps, spec.checkpoint_ms) == (0, 30_000)


def test_turning_checkpoints_off_is_allowed_and_warned_about() -> None:
    doc = base()
    doc["spec"]["checkpoint"] = {"intervalSteps": 0}
    spec = parse(doc)
    assert not spec.checkpoints_enabled
    assert spec.unbounded_warning is not None and "grow with the length of the run" in spec.unbounded_warning


def test_without_fault_tolerance_nothing_is_checkpointed_or_warned_about() -> None:
    doc = base()
    doc["spec"]["faultTolerance"] = False
    spec = parse(doc)
    assert (spec.checkpoints_enabled, spec.unbounded_warning) == (False, None)


def test_the_kubernetes_example_is_the_local_example_plus_cluster_fields() -> None:
    k8s = load_pipeline(EXAMPLE.with_name("kubernetes.yaml"), check_entry_point=False)
    local = load_pipeline(EXAMPLE, check_entry_point=False)
    assert [(s.name, s.kind, s.parallelism) for s in k8s.stages] == [(s.name, s.kind, s.parallelism) for s in local.stages]
    assert k8s.checkpoint_root == "s3://clickstream/checkpoints" and len(k8s.object_store_uris) == 3
    assert k8s.recovery_strategy == "auto"
    volume = load_pipeline(EXAMPLE.with_name("kubernetes-volume.yaml"), check_entry_point=False)
    assert [(s.name, s.kind, s.parallelism) for s in volume.stages] == [(s.name, s.kind, s.parallelism) for s in k8s.stages]
    assert str(volume.checkpoint_root) == "/data/checkpoints" and not volume.object_store_uris


def test_the_image_is_optional_the_operator_brings_its_own() -> None:
    doc = base()
    doc["spec"].pop("image")
    assert parse_pipeline(yaml.safe_dump(doc), EXAMPLE.parent, check_entry_point=False).image is None


@pytest.mark.parametrize(
    ("edit", "path", "message"),
    [
        (lambda d: d["spec"]["stages"][1].update(parallelism=1_000_000), "spec.stages[1].parallelism",
         "must be <= 512, got 1000000"),
        (lambda d: d["spec"].update(workers=1000), "spec.workers", "must be <= 128, got 1000"),
        (lambda d: [s.update(parallelism=512) for s in d["spec"]["stages"]] and d["spec"]["stages"].append(
            {"name": "copy", "parallelism": 512, "inputs": [{"stage": "per-user"}],
             "sink": {"parquet": {"path": "out/copy"}}}), "spec.stages",
         "2560 channels in all stages together exceed the limit of 2048 (the sum of parallelism)"),
        (lambda d: [s.update(parallelism=300) for s in d["spec"]["stages"]], "spec.stages",
         "90600 objects per step between stages exceed the limit of 65536 (a hash or broadcast edge makes "
         "upstream x downstream parallelism objects)"),
    ],
    ids=["parallelism", "workers", "channels", "objects"],
)
def test_what_a_spec_may_ask_for_is_bounded_before_anything_runs(edit: Any, path: str, message: str) -> None:
    doc = base()
    edit(doc)
    p = only_problem(doc)
    assert (p.path, p.message) == (path, message)


def test_a_file_of_several_documents_is_read_for_its_one_ftpipeline() -> None:
    claim = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data"}}
    text = yaml.safe_dump_all([claim, base()])
    spec = parse_pipeline(text, EXAMPLE.parent, check_entry_point=False)
    assert spec.name == "clickstream" and "PersistentVolumeClaim" not in spec.source_text
    with pytest.raises(SpecError, match="expected one FTPipeline among the file's 3 documents, found 2"):
        parse_pipeline(yaml.safe_dump_all([claim, base(), base()]), EXAMPLE.parent, check_entry_point=False)


# -- Kafka ------------------------------------------------------------------------------


def kafka_doc() -> dict[str, Any]:
    doc = base()
    doc["spec"]["kafka"] = {"bootstrapServers": "broker:9092"}
    stages(doc)[0] = {"name": "events", "parallelism": 3,
                      "source": {"kafka": {"topic": "clicks", "schema": {"user_id": "string", "n": "long"},
                                           "maxRecordsPerStep": 500}}}
    stages(doc)[3]["sink"] = {"kafka": {"topic": "totals", "key": ["user_id"]}, "existingOutput": "resume"}
    return doc


def test_a_kafka_source_and_sink_are_read_with_their_defaults() -> None:
    spec = parse(kafka_doc())
    source, sink = spec.stage("events"), spec.stage("output")
    assert spec.kafka_bootstrap == "broker:9092" and spec.uses_kafka
    assert source.kafka is not None and source.kafka.topic == "clicks" and source.kafka.format == "json"
    assert (source.kafka.starting, source.kafka.ending, source.kafka.max_records_per_step) == ("earliest", "", 500)
    assert sink.kafka_sink is not None and sink.sink is None
    assert (sink.kafka_sink.topic, sink.kafka_sink.key, sink.kafka_sink.existing) == ("totals", ("user_id",), "resume")


@pytest.mark.parametrize("edit,field,says", [
    (lambda k: k.pop("schema"), "spec.stages[0].source.kafka.schema", "required for format json"),
    (lambda k: k.update(format="raw"), "spec.stages[0].source.kafka.schema", "format raw has fixed columns"),
    (lambda k: k.update(startingOffsets="timestamp"), "spec.stages[0].source.kafka.startingTimestampMs",
     "startingOffsets timestamp"),
    (lambda k: k.update(startingTimestampMs=5), "spec.stages[0].source.kafka.startingTimestampMs",
     "startingOffsets timestamp"),
    (lambda k: k.update(topic="no spaces"), "spec.stages[0].source.kafka.topic", "does not match"),
    (lambda k: k.update(endingOffsets="earliest"), "spec.stages[0].source.kafka.endingOffsets", "latest"),
])
def test_a_kafka_source_that_cannot_be_read_as_written_is_refused_naming_the_field(edit: Any, field: str,
                                                                                   says: str) -> None:
    doc = kafka_doc()
    edit(stages(doc)[0]["source"]["kafka"])
    problem = only_problem(doc)
    assert problem.path == field and says in problem.message, problem


def test_an_aggregate_over_a_kafka_source_names_only_its_columns() -> None:
    doc = kafka_doc()
    stages(doc)[1] = {"name": "clean", "parallelism": 3, "inputs": [{"stage": "events", "partition": "hash",
                                                                     "keys": ["user"]}],
                      "transform": {"function": "clean_events"}}
    problem = only_problem(doc)
    assert problem.path == "spec.stages[1].inputs[0].keys[0]" and "'user' is not a column of 'events'" in problem.message


def test_a_sink_is_parquet_or_kafka_not_both() -> None:
    doc = kafka_doc()
    stages(doc)[3]["sink"]["parquet"] = {"path": "out"}
    assert "needs exactly one of parquet, kafka" in only_problem(doc).message


# -- Delta Lake ------------------------------------------------------------------------------


def test_a_delta_sink_is_read_with_schema_evolution_off_and_its_path_beside_the_pipeline() -> None:
    doc = kafka_doc()
    stages(doc)[3]["sink"] = {"delta": {"path": "out/orders", "partitionBy": ["user_id"]}}
    spec = parse(doc)
    sink = spec.stage("output").delta_sink
    assert sink is not None and spec.stage("output").is_sink and spec.stage("output").delta_sink is not None
    assert sink.path.parts[-2:] == ("out", "orders") and sink.path.is_absolute() and sink.partition_by == ("user_id",)
    assert (sink.merge_schema, sink.existing) == (False, "fail")
    stages(doc)[3]["sink"]["delta"]["mergeSchema"] = True
    assert parse(doc).stage("output").delta_sink.merge_schema  # type: ignore[union-attr]


def test_a_sink_naming_two_kinds_of_output_is_refused() -> None:
    doc = kafka_doc()
    stages(doc)[3]["sink"] = {"delta": {"path": "t"}, "kafka": {"topic": "totals"}}
    problem = only_problem(doc)
    assert problem.path == "spec.stages[3].sink" and "exactly one of parquet, kafka, delta" in problem.message


def test_checkpoint_storage_may_be_an_s3_uri_kept_as_written() -> None:
    doc = base()
    doc["spec"]["checkpoint"] = {"storage": {"path": "s3://bucket/pipelines/"}}
    spec = parse(doc)
    assert spec.checkpoint_root == "s3://bucket/pipelines" and spec.object_store_uris == ("s3://bucket/pipelines",)
    doc["spec"]["checkpoint"] = {"storage": {"path": "ckpt"}}
    assert parse(doc).checkpoint_root == Path("/pipelines/ckpt") and parse(doc).object_store_uris == ()


def test_an_s3_uri_without_a_bucket_is_refused_naming_the_field() -> None:
    doc = base()
    doc["spec"]["checkpoint"] = {"storage": {"path": "s3:///pipelines"}}
    [problem] = problems(doc)
    assert problem.path == "spec.checkpoint.storage.path" and "names no bucket" in problem.message


@pytest.mark.parametrize("path", sorted(p for p in (Path(__file__).resolve().parents[3] / "examples").rglob("*.yaml")
                                        if "kind: FTPipeline" in p.read_text()), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_example_pipeline_is_valid(path: Path) -> None:
    spec = load_pipeline(path, check_entry_point=False)
    assert spec.stages
