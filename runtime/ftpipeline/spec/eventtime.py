"""Event time in a pipeline document: which sources declare it, and what a window or a deduplication
names against it, checked before anything runs and turned into the model (``model.EventTime``,
``model.WindowSpec``).

A window cuts on a column of event time. Unless it names one (``timeColumn``)
it uses the column the sources upstream of it declare (``eventTime.column``),
which must then be one name; a window with no event-time source upstream has no
watermark to close it and is refused, naming the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Callable

from ftpipeline.spec.durations import micros, signed_micros
from ftpipeline.spec.model import DeduplicateOp, EventTime, JoinOp, WindowSpec
from ftpipeline.spec.problems import Problem

WINDOW_ONLY = ("avg", "first", "last", "countDistinct")  # aggregations that need a window
# what a file or Kafka schema may type an event-time column as (a long: milliseconds since the epoch)
TIME_TYPES = ("long",)


def _upstream_sources(stages: list[Mapping[str, Any]], index: Mapping[str, int], i: int) -> list[int]:
    seen: set[int] = set()
    todo = [i]
    out: list[int] = []
    while todo:
        at = todo.pop()
        for edge in stages[at].get("inputs", []):
            j = index.get(edge["stage"])
            if j is None or j in seen:
                continue
            seen.add(j)
            if "source" in stages[j]:
                out.append(j)
            todo.append(j)
    return sorted(out)


def problems(stages: list[Mapping[str, Any]], index: Mapping[str, int]) -> list[Problem]:
    found: list[Problem] = []
    for i, raw in enumerate(stages):
        at = f"spec.stages[{i}]"
        source = raw.get("source") or {}
        event = source.get("eventTime")
        if event is not None:
            found += _source_problems(at, source, event)
        if "deduplicate" in raw:
            found += _needs_event_time(stages, index, i, raw["deduplicate"], f"{at}.deduplicate")
            if micros(raw["deduplicate"]["within"]) == 0:
                found.append(Problem(f"{at}.deduplicate.within", "must be above 0"))
        if "join" in raw:
            found += _join_problems(stages, index, i, raw["join"], f"{at}.join")
        aggregate = raw.get("aggregate")
        if aggregate is None:
            continue
        window = aggregate.get("window")
        for j, agg in enumerate(aggregate["aggregations"]):
            if agg["op"] in WINDOW_ONLY and window is None:
                found.append(Problem(f"{at}.aggregate.aggregations[{j}].op",
                                     f"{agg['op']} needs a window (aggregate.window)"))
        found += _repeated_names(aggregate, window is not None, f"{at}.aggregate")
        if window is None:
            continue
        if "ttl" in aggregate:
            found.append(Problem(f"{at}.aggregate.ttl", "a window's state leaves with the watermark; ttl is for a "
                                                        "running aggregate"))
        if "sliding" in window:
            size, slide = micros(window["sliding"]["size"]), micros(window["sliding"]["slide"])
            if slide == 0 or size == 0 or size % slide:
                found.append(Problem(f"{at}.aggregate.window.sliding.slide",
                                     "must be above 0 and divide size (windows start every slide)"))
        for kind in ("tumbling", "session"):
            for name, value in window.get(kind, {}).items():
                if micros(value) == 0:
                    found.append(Problem(f"{at}.aggregate.window.{kind}.{name}", "must be above 0"))
        found += _needs_event_time(stages, index, i, window, f"{at}.aggregate.window")
    return found


BOUNDS = ("window_start", "window_end")  # the columns a window adds to its output


def _repeated_names(aggregate: Mapping[str, Any], windowed: bool, at: str) -> list[Problem]:
    """An aggregate's output is its keys, a window's bounds, one column per aggregation: a name twice is refused."""
    found = []
    keys = list(aggregate.get("keyBy", []))
    for j, key in enumerate(keys):
        if windowed and key in BOUNDS:
            found.append(Problem(f"{at}.keyBy[{j}]", f"{key!r} is the name of the window's own "
                                                     f"{key.split('_')[1]} in its output: rename it upstream"))
    taken = set(keys) | (set(BOUNDS) if windowed else set())
    for j, agg in enumerate(aggregate.get("aggregations", [])):
        if agg["name"] in taken:
            found.append(Problem(f"{at}.aggregations[{j}].name", f"{agg['name']!r} is already a column of the "
                                                                 "output (a key, a window's bound or another "
                                                                 "aggregation)"))
        taken.add(agg["name"])
    return found


def _needs_event_time(stages: list[Mapping[str, Any]], index: Mapping[str, int], i: int, raw: Mapping[str, Any],
                      at: str) -> list[Problem]:
    if not _event_sources(stages, index, i):
        return [Problem(at, "no source upstream declares eventTime, so no watermark would ever move")]
    if "timeColumn" not in raw and len(_columns_upstream(stages, index, i)) > 1:
        names = ", ".join(sorted(_columns_upstream(stages, index, i)))
        return [Problem(f"{at}.timeColumn",
                        f"required: the sources upstream declare different event-time columns ({names})")]
    return []


def _join_problems(stages: list[Mapping[str, Any]], index: Mapping[str, int], i: int, raw: Mapping[str, Any],
                   at: str) -> list[Problem]:
    found = []
    if signed_micros(raw["within"]["lower"]) > signed_micros(raw["within"]["upper"]):
        found.append(Problem(f"{at}.within", "lower is after upper: no pair could ever join"))
    for j, edge in enumerate(stages[i]["inputs"]):
        side = index[edge["stage"]]
        if not _side_sources(stages, index, side):
            found.append(Problem(f"spec.stages[{i}].inputs[{j}]", f"no source upstream of {edge['stage']!r} "
                                                                  "declares eventTime: its rows have no watermark"))
        elif "timeColumn" not in raw and len(_side_columns(stages, index, side)) > 1:
            names = ", ".join(sorted(_side_columns(stages, index, side)))
            found.append(Problem(f"{at}.timeColumn", f"required: the sources upstream of {edge['stage']!r} "
                                                     f"declare different event-time columns ({names})"))
    return found


def _side_sources(stages: list[Mapping[str, Any]], index: Mapping[str, int], j: int) -> list[int]:
    """The event-time sources of stage ``j``'s rows: itself if it is one, else those upstream of it."""
    if "source" in stages[j]:
        return [j] if "eventTime" in stages[j]["source"] else []
    return _event_sources(stages, index, j)


def _side_columns(stages: list[Mapping[str, Any]], index: Mapping[str, int], j: int) -> set[str]:
    return {stages[k]["source"]["eventTime"]["column"] for k in _side_sources(stages, index, j)}


def _source_problems(at: str, source: Mapping[str, Any], event: Mapping[str, Any]) -> list[Problem]:
    found: list[Problem] = []
    column = event["column"]
    if event.get("recordTimestamp"):
        kafka = source.get("kafka")
        if kafka is None:
            found.append(Problem(f"{at}.source.eventTime.recordTimestamp", "only a Kafka source has record "
                                                                           "timestamps"))
        elif column in (kafka.get("schema") or {}):
            found.append(Problem(f"{at}.source.eventTime.column", f"{column!r} is a column of the records; "
                                                                  "recordTimestamp adds it: name another"))
        return found
    schema = (source.get("file") or source.get("kafka") or {}).get("schema")
    if schema:
        if column not in schema:
            found.append(Problem(f"{at}.source.eventTime.column", f"{column!r} is not a column of the source "
                                                                  f"(its columns: {', '.join(sorted(schema))})"))
        elif schema[column] not in TIME_TYPES:
            found.append(Problem(f"{at}.source.eventTime.column", f"{column!r} is {schema[column]}; event time is "
                                                                  "a long of milliseconds since the epoch"))
    return found


def _event_sources(stages: list[Mapping[str, Any]], index: Mapping[str, int], i: int) -> list[int]:
    return [j for j in _upstream_sources(stages, index, i) if "eventTime" in stages[j]["source"]]


def _columns_upstream(stages: list[Mapping[str, Any]], index: Mapping[str, int], i: int) -> set[str]:
    return {stages[j]["source"]["eventTime"]["column"] for j in _event_sources(stages, index, i)}


def event_time(raw: Mapping[str, Any]) -> EventTime | None:
    event = (raw.get("source") or {}).get("eventTime")
    if event is None:
        return None
    bound = event.get("watermark", {}).get("maxOutOfOrderness", "0s")
    return EventTime(event["column"], micros(bound), micros(event["idleTimeout"]) if "idleTimeout" in event else 0,
                     bool(event.get("recordTimestamp", False)))


def _late(raw: Mapping[str, Any], resolve: Callable[[str], Path | str]) -> tuple[Path | str | None, str | None]:
    """A stage's ``lateData``: a directory, or a Kafka topic."""
    late = raw.get("lateData") or {}
    return (resolve(late["path"]) if "path" in late else None), late.get("topic")


def deduplicate(stages: list[Mapping[str, Any]], i: int, resolve: Callable[[str], Path | str]) -> DeduplicateOp | None:
    raw = stages[i].get("deduplicate")
    if raw is None:
        return None
    index = {s["name"]: k for k, s in enumerate(stages)}
    column = raw.get("timeColumn") or min(_columns_upstream(stages, index, i))
    late, topic = _late(raw, resolve)
    return DeduplicateOp(tuple(raw["keys"]), micros(raw["within"]), column, late, topic)


def join(stages: list[Mapping[str, Any]], i: int, resolve: Callable[[str], Path | str]) -> JoinOp | None:
    raw = stages[i].get("join")
    if raw is None:
        return None
    index = {s["name"]: k for k, s in enumerate(stages)}
    left, right = (edge["stage"] for edge in stages[i]["inputs"])
    times = [raw.get("timeColumn") or min(_side_columns(stages, index, index[side])) for side in (left, right)]
    late, topic = _late(raw, resolve)
    return JoinOp(raw.get("type", "inner"), tuple(raw["keys"]), left, right, signed_micros(raw["within"]["lower"]),
                  signed_micros(raw["within"]["upper"]), times[0], times[1], late, topic)


def window(stages: list[Mapping[str, Any]], i: int, resolve: Callable[[str], Path | str]) -> WindowSpec | None:
    raw = stages[i]["aggregate"].get("window")
    if raw is None:
        return None
    index = {s["name"]: k for k, s in enumerate(stages)}
    column = raw.get("timeColumn") or min(_columns_upstream(stages, index, i))
    late, topic = _late(raw, resolve)
    common = {"time_column": column, "allowed_lateness_us": micros(raw.get("allowedLateness", "0s")),
              "emit": raw.get("emit", "append"), "late_data": late, "late_topic": topic}
    if "tumbling" in raw:
        size = micros(raw["tumbling"]["size"])
        return WindowSpec("tumbling", size_us=size, slide_us=size, **common)
    if "session" in raw:
        return WindowSpec("session", gap_us=micros(raw["session"]["gap"]), **common)
    return WindowSpec("sliding", size_us=micros(raw["sliding"]["size"]),
                      slide_us=micros(raw["sliding"]["slide"]), **common)
