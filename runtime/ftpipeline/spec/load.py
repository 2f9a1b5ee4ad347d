"""Load an FTPipeline document and reject it with field paths, before any worker starts.

Validation runs in three passes, each reporting every problem it finds as
``spec.stages[2].parallelism: <what is wrong>``:

1. the structural schema (types, unknown fields, enums, minimums), then its
   CEL rules for cross-field constraints (``spec/cel.py``) — the same checks
   the API server applies to the CRD;
2. the dataflow: exactly one kind per stage, unique names, known inputs, no
   cycles, sources without inputs, partitioning that fits the parallelism;
3. the entry point: the module imports and every function a stage names
   exists and is callable.

A pass only runs when the previous one succeeded, because its checks assume
the shapes the earlier pass guarantees.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import Any

import jsonschema
import yaml

from ftpipeline.objectstore.base import is_remote, split_uri
from ftpipeline.spec.model import (
    AggregateOp,
    Aggregation,
    DeltaSink,
    Edge,
    FileSource,
    GeneratorSource,
    KafkaSink,
    KafkaSource,
    ParquetSink,
    Partition,
    PipelineSpec,
    LookupOp,
    ProcessOp,
    StageKind,
    StageSpec,
    Trigger,
)
from ftpipeline.spec.cel import violations
from ftpipeline.spec.inputs import input_problems
from ftpipeline.spec.problems import Problem as Problem, SpecError as SpecError  # re-exported: the loader raises it
from ftpipeline.spec.columns import column_problems
from ftpipeline.spec import eventtime
from ftpipeline.spec.durations import PATTERN as DURATION_PATTERN
from ftpipeline.spec.schema import (
    DEFAULT_CHECKPOINT_STEPS,
    DEFAULT_MAX_IN_MEMORY_BYTES,
    FTPIPELINE_SCHEMA,
    KIND,
    KNOWN_INPUTS,
    MAX_CHANNELS,
    MAX_OBJECTS_PER_STEP,
    UNIQUE_STAGES,
)

_KINDS = ("source", "transform", "aggregate", "deduplicate", "join", "process", "lookup", "sink")


def _path(parts: Iterable[Any]) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _schema_problems(doc: Any) -> list[Problem]:
    validator = jsonschema.Draft202012Validator(FTPIPELINE_SCHEMA)
    problems = []
    for error in sorted(validator.iter_errors(doc), key=lambda e: list(map(str, e.absolute_path))):
        where = list(error.absolute_path)
        if error.validator == "additionalProperties":
            allowed = sorted(error.schema.get("properties", {}))
            for extra in sorted(set(error.instance) - set(allowed)):
                problems.append(Problem(_path([*where, extra]), f"unknown field (allowed: {', '.join(allowed)})"))
            continue
        if error.validator == "required":
            missing = str(error.message).split("'")[1]
            problems.append(Problem(_path([*where, missing]), "required field is missing"))
            continue
        if error.validator == "type":
            message = f"must be {_article(str(error.validator_value))}, got {error.instance!r}"
        elif error.validator == "enum":
            message = f"must be one of {', '.join(map(str, error.validator_value))}; got {error.instance!r}"
        elif error.validator == "minimum":
            message = f"must be >= {error.validator_value}, got {error.instance!r}"
        elif error.validator == "maximum":
            message = f"must be <= {error.validator_value}, got {error.instance!r}"
        elif error.validator == "pattern" and error.validator_value == DURATION_PATTERN:
            message = f"{error.instance!r} is not a duration: a whole number and a unit (ms, s, m, min, h, d)"
        elif error.validator == "pattern":
            message = f"{error.instance!r} does not match {error.validator_value}"
        else:
            message = error.message
        problems.append(Problem(_path(where), message))
    return problems


def _article(type_name: str) -> str:
    return f"an {type_name}" if type_name[0] in "aeiou" else f"a {type_name}"


def _stage_kind(raw: Mapping[str, Any]) -> StageKind:
    """The stage's one kind (the schema's CEL rules guarantee exactly one)."""
    return StageKind(next(k for k in _KINDS if k in raw))


def _location_problems(spec: Mapping[str, Any]) -> list[Problem]:
    """An ``s3://`` location must name a bucket."""
    places = [("spec.checkpoint.storage.path", spec.get("checkpoint", {}).get("storage", {}).get("path", ""))]
    places.append(("spec.deadLetter.path", spec.get("deadLetter", {}).get("path", "")))
    places += [(f"spec.stages[{i}].sink.parquet.path", raw["sink"]["parquet"]["path"])
               for i, raw in enumerate(spec["stages"]) if "parquet" in raw.get("sink", {})]
    for i, raw in enumerate(spec["stages"]):
        for field, holder in (("deduplicate", raw.get("deduplicate")), ("join", raw.get("join")),
                              ("aggregate.window", (raw.get("aggregate") or {}).get("window"))):
            if holder and "path" in (holder.get("lateData") or {}):
                places.append((f"spec.stages[{i}].{field}.lateData.path", holder["lateData"]["path"]))
    problems = []
    for field, path in places:
        if is_remote(path):
            try:
                split_uri(path)
            except ValueError as e:
                problems.append(Problem(field, str(e)))
    return problems


def _dataflow_problems(spec: Mapping[str, Any]) -> list[Problem]:
    problems: list[Problem] = _location_problems(spec)
    stages: list[Mapping[str, Any]] = spec["stages"]
    index: dict[str, int] = {}
    for i, raw in enumerate(stages):
        at = f"spec.stages[{i}]"
        if raw["name"] in index:
            problems.append(Problem(f"{at}.name", f"duplicate stage name {raw['name']!r} (also spec.stages[{index[raw['name']]}])"))
        index.setdefault(raw["name"], i)
        kind = _stage_kind(raw)
        inputs = raw.get("inputs", [])
        if kind is StageKind.SOURCE and inputs:
            problems.append(Problem(f"{at}.inputs", "a source has no inputs"))
        if kind is not StageKind.SOURCE and not inputs:
            problems.append(Problem(f"{at}.inputs", f"a {kind.value} needs at least one input"))
        if kind is StageKind.JOIN and len(inputs) != 2:
            problems.append(Problem(f"{at}.inputs", f"a join has two inputs, the left then the right; got {len(inputs)}"))
        elif kind is StageKind.JOIN and inputs[0]["stage"] == inputs[1]["stage"]:
            problems.append(Problem(f"{at}.inputs[1].stage", "a join's two inputs are two stages (to join a stream "
                                                              "with itself, add a transform that passes it on)"))
        if kind is StageKind.SOURCE and "file" in raw["source"]:
            file = raw["source"]["file"]
            if file["format"] != "parquet" and not file.get("schema"):
                problems.append(Problem(f"{at}.source.file.schema", f"required for format {file['format']}"))
        if kind is StageKind.SOURCE and "kafka" in raw["source"]:
            kafka = raw["source"]["kafka"]
            if kafka.get("format", "json") == "json" and not kafka.get("schema"):
                problems.append(Problem(f"{at}.source.kafka.schema", "required for format json"))
            if kafka.get("format") == "raw" and kafka.get("schema"):
                problems.append(Problem(f"{at}.source.kafka.schema", "format raw has fixed columns; set no schema"))
            if (kafka.get("startingOffsets") == "timestamp") != ("startingTimestampMs" in kafka):
                problems.append(Problem(f"{at}.source.kafka.startingTimestampMs",
                                        "set it with startingOffsets timestamp, and only then"))
        if kind is StageKind.LOOKUP and "kafka" in raw["lookup"]["table"]:
            columns = raw["lookup"]["table"]["kafka"]["schema"]
            for j, key in enumerate(raw["lookup"]["keys"]):
                if key not in columns:
                    problems.append(Problem(f"{at}.lookup.keys[{j}]", f"{key!r} is not a column of the table's schema "
                                            f"(lookup.table.kafka.schema: {', '.join(columns)})"))
        if kind is StageKind.AGGREGATE:
            for j, agg in enumerate(raw["aggregate"]["aggregations"]):
                if agg["op"] != "count" and not agg.get("column"):
                    problems.append(Problem(f"{at}.aggregate.aggregations[{j}].column", f"required for op {agg['op']}"))
    for i, raw in enumerate(stages):
        for j, edge in enumerate(raw.get("inputs", [])):
            at = f"spec.stages[{i}].inputs[{j}]"
            upstream = edge["stage"]
            if upstream not in index:
                known = ", ".join(index)
                problems.append(Problem(f"{at}.stage", f"unknown stage {upstream!r} (known: {known})"))
                continue
            up = stages[index[upstream]]
            if "sink" in up:
                problems.append(Problem(f"{at}.stage", f"{upstream!r} is a sink and has no output"))
            partition = edge.get("partition")
            mine, theirs = raw.get("parallelism", 1), up.get("parallelism", 1)
            if partition == "forward" and mine != theirs:
                problems.append(Problem(f"{at}.partition", f"forward needs equal parallelism ({upstream}: {theirs}, {raw['name']}: {mine})"))
            if partition == "hash" and not edge.get("keys"):
                problems.append(Problem(f"{at}.keys", "hash partitioning needs keys"))
            if partition is None and not _keyed(raw) and mine != theirs:
                problems.append(Problem(f"{at}.partition", f"required when parallelism differs ({upstream}: {theirs}, {raw['name']}: {mine})"))
    if not problems:
        cycle = _find_cycle({s["name"]: [e["stage"] for e in s.get("inputs", [])] for s in stages})
        if cycle:
            first = index[cycle[0]]
            problems.append(Problem(f"spec.stages[{first}].inputs", f"cycle: {' -> '.join(cycle)}"))
    if not problems and not any("sink" in s for s in stages):
        problems.append(Problem("spec.stages", "needs at least one sink"))
    if not problems:
        problems.extend(_size_problems(stages))
    if not problems:
        problems.extend(Problem(path, message) for path, message in column_problems(stages, index))
    if not problems:
        problems.extend(eventtime.problems(stages, index))
    return problems



def _keyed(stage: Mapping[str, Any]) -> bool:
    """Does the stage keep keyed state (its inputs are hash-partitioned on its keys by default)?"""
    return "aggregate" in stage or "deduplicate" in stage or "join" in stage or "process" in stage


def _size_problems(stages: list[Mapping[str, Any]]) -> list[Problem]:
    """Bounds on the whole dataflow, so no spec can exhaust the operator or the lineage store."""
    width = {s["name"]: int(s.get("parallelism", 1)) for s in stages}
    channels = sum(width.values())
    if channels > MAX_CHANNELS:
        return [Problem("spec.stages", f"{channels} channels in all stages together exceed the limit of "
                                       f"{MAX_CHANNELS} (the sum of parallelism)")]
    objects = 0
    for s in stages:
        for edge in s.get("inputs", []):
            forward = edge.get("partition") == "forward" or (  # the default: see the schema's partition
                "partition" not in edge and not _keyed(s) and width[edge["stage"]] == width[s["name"]])
            objects += width[s["name"]] if forward else width[edge["stage"]] * width[s["name"]]
    if objects > MAX_OBJECTS_PER_STEP:
        return [Problem("spec.stages", f"{objects} objects per step between stages exceed the limit of "
                                       f"{MAX_OBJECTS_PER_STEP} (a hash or broadcast edge makes upstream x "
                                       f"downstream parallelism objects)")]
    return []


def _find_cycle(inputs: Mapping[str, Sequence[str]]) -> list[str]:
    """Return one cycle as a path of stage names (first == last), or []."""
    WHITE, GREY, BLACK = 0, 1, 2
    color = dict.fromkeys(inputs, WHITE)
    stack: list[str] = []

    def visit(node: str) -> list[str]:
        color[node] = GREY
        stack.append(node)
        for nxt in inputs[node]:
            if color[nxt] == GREY:
                return [*stack[stack.index(nxt):], nxt]
            if color[nxt] == WHITE:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        color[node] = BLACK
        return []

    for name in inputs:
        if color[name] == WHITE:
            found = visit(name)
            if found:
                return found
    return []


def _pickle_by_value(module: ModuleType) -> None:
    """Spark's Python workers cannot import a module loaded from a file under a name of ours, so a UDF
    defined in it travels by value (its code), not as a reference to the module."""
    try:
        from pyspark import cloudpickle
    except ImportError:  # a process without Spark pickles nothing
        return
    cloudpickle.register_pickle_by_value(module)  # type: ignore[no-untyped-call]


def load_entry_module(entry_point: str, base_dir: Path) -> ModuleType:
    """Import the entry point: a .py file (relative to ``base_dir``) or a dotted module."""
    if entry_point.endswith(".py") or "/" in entry_point:
        path = (base_dir / entry_point).resolve()
        if not path.is_file():
            raise FileNotFoundError(f"no such file {path}")
        module_name = f"ftpipeline_entry_{path.stem}"
        cached = sys.modules.get(module_name)
        if cached is not None and getattr(cached, "__file__", None) == str(path):
            return cached
        if str(path.parent) not in sys.path:
            sys.path.insert(0, str(path.parent))
        loaded = importlib.util.spec_from_file_location(module_name, path)
        assert loaded is not None and loaded.loader is not None
        module = importlib.util.module_from_spec(loaded)
        sys.modules[module_name] = module
        try:
            loaded.loader.exec_module(module)
        except BaseException:
            del sys.modules[module_name]  # never cache a half-imported module
            raise
        _pickle_by_value(module)
        return module
    return importlib.import_module(entry_point)


def _needs_spark(exc: BaseException) -> bool:
    """The module imports only where a Spark session runs (PySpark says so by this error class); workers
    create theirs before they import it, and check it then (``worker/exits.py``)."""
    condition = getattr(exc, "getCondition", None) or getattr(exc, "getErrorClass", None)
    return callable(condition) and condition() == "SESSION_OR_CONTEXT_NOT_EXISTS"


def entry_problems(spec: PipelineSpec) -> list[Problem]:
    """Pass 3: the entry point imports and every function a stage names exists (``ftpipeline run`` before a
    run; a worker on Kubernetes, where only the image has the module, before its first task)."""
    try:
        module = load_entry_module(spec.entry_point, spec.base_dir)
    except Exception as exc:  # the user's module: any failure to import is the answer
        if _needs_spark(exc):  # e.g. ``@udf("long")`` at module level: a worker imports it with Spark running
            return []
        return [Problem("spec.entryPoint", f"cannot import {spec.entry_point!r}: {type(exc).__name__}: {exc}")]
    problems = []
    for i, stage in enumerate(spec.stages):
        if stage.process is not None:
            found = getattr(module, stage.process.class_name, None)
            if not isinstance(found, type) or not callable(getattr(found, "process", None)):
                problems.append(Problem(f"spec.stages[{i}].process.class", f"{spec.entry_point!r} has no class "
                                        f"{stage.process.class_name!r} with a process(key, rows, ctx) method"))
            elif ((stage.process.initial_delta or stage.process.initial_parquet) is not None
                  and not callable(getattr(found, "init_state", None))):
                problems.append(Problem(f"spec.stages[{i}].process.initialState", f"class "
                                        f"{stage.process.class_name!r} has no init_state(key, rows, ctx) method to "
                                        "take it"))
            if stage.process.rows == "pandas" and importlib.util.find_spec("pandas") is None:
                problems.append(Problem(f"spec.stages[{i}].process.rows", "pandas is not installed where the "
                                        "pipeline runs: install it beside your code, or take rows as arrow"))
            continue
        name = stage.generator.function if stage.generator else stage.function
        if name is None:
            continue
        field = "source.generator.function" if stage.generator else "transform.function"
        if not callable(getattr(module, name, None)):
            problems.append(Problem(f"spec.stages[{i}].{field}", f"{spec.entry_point!r} has no function {name!r}"))
    return problems


def _resolve(base_dir: Path, path: str) -> Path:
    p = Path(path)
    return p if p.is_absolute() else (base_dir / p).resolve()


def _location(base_dir: Path, path: str) -> Path | str:
    """A path (resolved as ``_resolve`` does) or an object store URI (``s3://bucket/prefix``), kept as written."""
    return path.rstrip("/") if is_remote(path) else _resolve(base_dir, path)


def _build(doc: Mapping[str, Any], base_dir: Path, text: str) -> PipelineSpec:
    spec = doc["spec"]
    stages = []
    for at, raw in enumerate(spec["stages"]):
        kind = _stage_kind(raw)
        parallelism = raw.get("parallelism", 1)
        edges = []
        for edge in raw.get("inputs", []):
            partition, keys = edge.get("partition"), tuple(edge.get("keys", ()))
            if partition is None:
                if kind is StageKind.AGGREGATE:
                    partition, keys = "hash", tuple(raw["aggregate"]["keyBy"])
                elif kind is StageKind.DEDUPLICATE:
                    partition, keys = "hash", tuple(raw["deduplicate"]["keys"])
                elif kind is StageKind.JOIN:
                    partition, keys = "hash", tuple(raw["join"]["keys"])
                elif kind is StageKind.PROCESS:
                    partition, keys = "hash", tuple(raw["process"]["keys"])
                else:
                    partition = "forward"
            edges.append(Edge(edge["stage"], raw["name"], Partition(partition), keys))
        generator = file = sink = aggregate = kafka = kafka_sink = delta_sink = process = lookup = None
        function = None
        if kind is StageKind.SOURCE and "generator" in raw["source"]:
            g = raw["source"]["generator"]
            generator = GeneratorSource(g["function"], g["rowsPerStep"], g.get("seed", 0))
        elif kind is StageKind.SOURCE and "kafka" in raw["source"]:
            k = raw["source"]["kafka"]
            kafka = KafkaSource(k["topic"], k.get("format", "json"), tuple(k.get("schema", {}).items()),
                                k.get("startingOffsets", "earliest"), k.get("startingTimestampMs", 0),
                                k.get("endingOffsets", ""), k.get("maxRecordsPerStep", 0))
        elif kind is StageKind.SOURCE:
            f = raw["source"]["file"]
            file = FileSource(
                _resolve(base_dir, f["path"]), f["format"], f["rowsPerStep"],
                tuple(f.get("schema", {}).items()), f.get("follow", False),
            )
        elif kind is StageKind.TRANSFORM:
            function = raw["transform"]["function"]
        elif kind is StageKind.AGGREGATE:
            a = raw["aggregate"]
            aggregate = AggregateOp(
                tuple(a["keyBy"]),
                tuple(Aggregation(x["name"], x["op"], x.get("column")) for x in a["aggregations"]),
                a.get("ttl", {}).get("steps", 0),
                eventtime.window(spec["stages"], at, lambda path: _location(base_dir, path)),
            )
        elif kind in (StageKind.DEDUPLICATE, StageKind.JOIN):
            pass  # eventtime.deduplicate and eventtime.join, below
        elif kind is StageKind.LOOKUP:
            table = raw["lookup"]["table"]
            where = {k: _location(base_dir, v["path"]) for k, v in table.items() if k != "kafka"}
            topic = (KafkaSource(table["kafka"]["topic"], "json", tuple(table["kafka"]["schema"].items()))
                     if "kafka" in table else None)
            lookup = LookupOp(raw["lookup"].get("type", "inner"), tuple(raw["lookup"]["keys"]), where.get("delta"),
                              where.get("parquet"), topic)
        elif kind is StageKind.PROCESS:
            p = raw["process"]
            initial = {k: _location(base_dir, v["path"]) for k, v in p.get("initialState", {}).items()}
            process = ProcessOp(p["class"], tuple(p["keys"]), tuple(p["output"].items()), p.get("rows", "arrow"),
                                initial.get("delta"), initial.get("parquet"))
        elif "kafka" in raw["sink"]:
            k = raw["sink"]["kafka"]
            kafka_sink = KafkaSink(k["topic"], tuple(k.get("key", ())), raw["sink"].get("existingOutput", "fail"))
        elif "delta" in raw["sink"]:
            d = raw["sink"]["delta"]
            delta_sink = DeltaSink(_location(base_dir, d["path"]), tuple(d.get("partitionBy", ())),
                                   bool(d.get("mergeSchema", False)), raw["sink"].get("existingOutput", "fail"))
        else:
            sink = ParquetSink(_location(base_dir, raw["sink"]["parquet"]["path"]),
                               raw["sink"].get("existingOutput", "fail"))
        stages.append(StageSpec(raw["name"], kind, parallelism, tuple(edges), generator, file, function, aggregate, sink,
                                kafka=kafka, kafka_sink=kafka_sink, delta_sink=delta_sink,
                                event_time=eventtime.event_time(raw),
                                deduplicate=eventtime.deduplicate(spec["stages"], at, lambda path: _location(base_dir, path)),
                                join=eventtime.join(spec["stages"], at, lambda path: _location(base_dir, path)),
                                process=process, lookup=lookup))
    steps = spec.get("steps", {})
    trig = steps.get("trigger", {})
    budget = spec.get("recovery", {}).get("restartBudget", {})
    backoff = spec.get("recovery", {}).get("backoff", {})
    return PipelineSpec(
        name=doc["metadata"]["name"],
        image=spec.get("image"),
        entry_point=spec["entryPoint"],
        workers=spec["workers"],
        stages=tuple(stages),
        base_dir=base_dir,
        fault_tolerance=spec.get("faultTolerance", True),
        chaining=spec.get("chaining", True),
        reuse_plans=spec.get("reusePlans", True),
        mode=steps.get("mode", "lockstep"),
        window=steps.get("window", 3) if steps.get("mode") == "pipelined" else 1,
        max_steps=steps.get("maxSteps"),
        trigger=Trigger(trig.get("records", 1), trig.get("timerMs", 100), trig.get("tickMs", 0)),
        recovery_strategy=spec.get("recovery", {}).get("strategy", "lineage"),
        heartbeat_timeout_ms=spec.get("recovery", {}).get("heartbeatTimeoutMs", 6000),
        restart_max=budget.get("maxRestarts", 5),
        restart_window_s=budget.get("windowSeconds", 600),
        backoff_initial_ms=backoff.get("initialMs", 1000),
        backoff_max_ms=backoff.get("maxMs", 60_000),
        backoff_jitter_percent=backoff.get("jitterPercent", 20),
        progress_deadline_s=spec.get("progressDeadlineSeconds", 600),
        gc_interval_ms=spec.get("gc", {}).get("intervalMs", 500),
        redis_url=spec.get("redis", {}).get("url") or None,
        spark_master=spec.get("spark", {}).get("master", ""),
        spark_conf=tuple(sorted(spec.get("spark", {}).get("conf", {}).items())),
        max_in_memory_bytes=spec.get("spark", {}).get("maxInMemoryBytes", DEFAULT_MAX_IN_MEMORY_BYTES),
        dead_letter=_location(base_dir, spec["deadLetter"]["path"]) if "deadLetter" in spec else None,
        checkpoint_steps=_checkpoint_steps(spec),
        checkpoint_ms=spec.get("checkpoint", {}).get("intervalMs") or 0,
        checkpoint_retain=spec.get("checkpoint", {}).get("retain", 2),
        checkpoint_max_age_s=spec.get("checkpoint", {}).get("maxAgeSeconds", 0),
        checkpoint_path=_location(base_dir, spec["checkpoint"]["storage"]["path"])
        if "storage" in spec.get("checkpoint", {}) else None,
        state_backend=spec.get("state", {}).get("backend", "rocksdb"),
        zookeeper=spec.get("zookeeper", {}).get("connect") or None,
        kafka_bootstrap=spec.get("kafka", {}).get("bootstrapServers", ""),
        source_text=text,
    )


def checkpoint_interval_given(spec: Mapping[str, Any]) -> bool:
    """Does the pipeline set ``checkpoint.intervalSteps`` or ``intervalMs``? If not, the default applies."""
    given = spec.get("checkpoint") or {}
    return "intervalSteps" in given or "intervalMs" in given


def _checkpoint_steps(spec: Mapping[str, Any]) -> int:
    """``checkpoint.intervalSteps``; when neither interval is set, a fault-tolerant pipeline's default."""
    if not checkpoint_interval_given(spec):
        return DEFAULT_CHECKPOINT_STEPS if spec.get("faultTolerance", True) else 0
    return int(spec["checkpoint"].get("intervalSteps") or 0)


def document_problems(doc: Mapping[str, Any]) -> list[Problem]:
    """The problems the document alone decides (passes 1 and 2: no file or module is read), as the
    admission webhook reports them for a stored object and ``parse_pipeline`` before a run."""
    problems = _schema_problems(doc)
    if not problems:
        problems = [Problem(_path(where), message) for where, message in violations(FTPIPELINE_SCHEMA, doc)]
    if problems and all(p.message in (UNIQUE_STAGES, KNOWN_INPUTS) for p in problems):
        problems = _dataflow_problems(doc["spec"]) or problems  # the same finding, naming the stage
    if not problems:
        problems = _dataflow_problems(doc["spec"])
    return problems


def parse_pipeline(text: str, base_dir: Path, source: str = "<text>", check_entry_point: bool = True) -> PipelineSpec:
    """Validate an FTPipeline document given as text; raise :class:`SpecError`. A file of several
    documents (an FTPipeline with the claim it mounts, as ``kubectl apply`` takes) is read for its
    FTPipeline."""
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        raise SpecError(source, [Problem("", f"not valid YAML: {exc}")]) from exc
    doc = docs[0] if len(docs) == 1 else None
    if len(docs) > 1:
        pipelines = [d for d in docs if isinstance(d, dict) and d.get("kind") == KIND]
        if len(pipelines) != 1:
            raise SpecError(source, [Problem("", f"expected one FTPipeline among the file's {len(docs)} "
                                                 f"documents, found {len(pipelines)}")])
        doc = pipelines[0]
        text = yaml.safe_dump(doc, sort_keys=False)  # what the workers are given: the pipeline alone
    if not isinstance(doc, dict):
        raise SpecError(source, [Problem("", "expected a YAML mapping with apiVersion, kind, metadata, spec")])
    problems = document_problems(doc)
    if problems:
        raise SpecError(source, problems)
    spec = _build(doc, base_dir.resolve(), text)
    if check_entry_point:  # what this machine can see: the module, the inputs it reads
        problems = entry_problems(spec) + input_problems(spec)
        if problems:
            raise SpecError(source, problems)
    return spec


def load_pipeline(path: str | Path, check_entry_point: bool = True) -> PipelineSpec:
    """Read and validate an FTPipeline YAML file."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise SpecError(str(p), [Problem("", f"cannot read: {exc.strerror}")]) from exc
    return parse_pipeline(text, p.resolve().parent, str(p), check_entry_point)


KAFKA_ENV = "FTPIPELINE_KAFKA"  # a worker's Kafka endpoint when spec.kafka.secretRef names it (its pod's env)
CONTROL_PLANE_FIELDS = ("redis", "zookeeper")  # spec fields only the sidecar and the coordinator may read


def for_user_code(text: str) -> str:
    """The pipeline document as the Spark process (which runs user code) gets it: without the endpoints
    and credentials of the control plane (``spec.redis``, ``spec.zookeeper``)."""
    doc = yaml.safe_load(text)
    spec = doc.get("spec") if isinstance(doc, dict) else None
    if isinstance(spec, dict):
        for name in CONTROL_PLANE_FIELDS:
            spec.pop(name, None)
    return str(yaml.safe_dump(doc, sort_keys=False))


def worker_spec(config: Mapping[str, Any]) -> PipelineSpec:
    """The spec a worker is given by the coordinator (``create``/``hello``): the document, and the
    identity its state is keyed by, how its stages are chained and planned, and the Kafka cluster of a private
    broker, which the document alone does not carry (``ftpipeline run --no-chaining``/``--no-plan-reuse`` override it): the workers' tasks must be
    the coordinator's."""
    spec = parse_pipeline(config["spec"], Path(config["base_dir"]), check_entry_point=False)
    return replace(spec, identity=config.get("identity", ""), label=config.get("label", ""),
                   chaining=bool(config.get("chaining", spec.chaining)),
                   reuse_plans=bool(config.get("reuse_plans", spec.reuse_plans)),
                   kafka_bootstrap=config.get("kafka_bootstrap") or os.environ.get(KAFKA_ENV) or spec.kafka_bootstrap)
