"""The oracle's own reading of Kafka topics: a source's records with their steps, a sink's released rows.

Why a second reader, as for files (``files.py``): the oracle must not trust
the code it checks. It reads each topic whole, committed records only, with
a plain consumer from each partition's beginning (``kafka/topics.py``), and
applies the documented rules itself:

- a record of partition p at offset o belongs to the step whose recorded
  range of slot ``<stage>.<p>`` holds o; which ranges the steps read is the
  run's step history (``control/history.py``), the one thing the oracle takes
  from the run: the *batching* it chose as records arrived, not anything it
  computed;
- a value is a row when it is a JSON object whose schema columns have their
  types (the same rules as a JSON Lines file); otherwise a dead letter at
  ``<topic>/<partition>@<offset>``;
- a sink's released rows are the JSON objects of the output topic's
  committed records, each in the step its ``ftpipeline-step`` header names.
"""

from __future__ import annotations

import bisect
import json
from pathlib import Path
from typing import Any

import pyarrow as pa

from ftpipeline.control import history as step_history
from ftpipeline.kafka.topics import read_committed
from ftpipeline.oracle.files import STEP, Letter, json_row, types_of
from ftpipeline.objectstore.base import ObjectStore
from ftpipeline.spec.model import StageSpec

RAW = pa.schema([("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()), ("partition", pa.int64()),
                 ("offset", pa.int64()), ("timestamp", pa.int64())])


def _steps_of(stage: StageSpec, history: dict[int, dict[str, tuple[int, int]]], steps: int
              ) -> dict[int, tuple[list[int], list[tuple[int, int]]]]:
    """partition -> (range starts, [(end, step)]) of the steps 1..``steps`` that read it, for lookups."""
    by_partition: dict[int, list[tuple[int, int, int]]] = {}
    for step, offsets in history.items():
        if step > steps:
            continue
        for slot, (lo, hi) in offsets.items():
            name, _, partition = slot.rpartition(".")
            if name == stage.name and hi > lo:
                by_partition.setdefault(int(partition), []).append((lo, hi, step))
    out: dict[int, tuple[list[int], list[tuple[int, int]]]] = {}
    for number, ranges in by_partition.items():
        ranges.sort()
        out[number] = ([lo for lo, _, _ in ranges], [(hi, step) for _, hi, step in ranges])
    return out


def read_kafka_stage(stage: StageSpec, bootstrap: str, steps: int, history_path: ObjectStore | Path) -> tuple[pa.Table, list[Letter]]:
    """Every record of steps 1..``steps`` of a Kafka source (with a ``_step`` column), and its dead letters."""
    spec = stage.kafka
    assert spec is not None
    history = step_history.read(history_path)
    if not history and steps > 0:
        where = history_path if isinstance(history_path, Path) else history_path.uri
        raise ValueError(f"stage {stage.name!r}: no step history at {where}: the oracle cannot tell which "
                         "records each step read")
    lookup = _steps_of(stage, history, steps)
    schema = [(n, k) for n, k in spec.schema]
    rows: list[dict[str, Any]] = []
    letters: list[Letter] = []
    for record in read_committed(bootstrap, spec.topic):
        starts, ends = lookup.get(record.partition, ([], []))
        i = bisect.bisect_right(starts, record.offset) - 1
        if i < 0 or record.offset >= ends[i][0]:
            continue  # read by no step up to ``steps``
        step = ends[i][1]
        if spec.format == "raw":
            rows.append({"key": record.key, "value": record.value, "topic": spec.topic, "partition": record.partition,
                         "offset": record.offset, "timestamp": record.timestamp, STEP: step})
            continue
        raw = record.value or b""
        row = json_row(raw, schema)
        if row is None:
            letters.append(Letter(stage.name, step, f"{spec.topic}/{record.partition}@{record.offset}",
                                  raw.decode("utf-8", errors="replace")))
        else:
            rows.append({**row, STEP: step})
    columns = RAW if spec.format == "raw" else types_of(schema)
    return pa.Table.from_pylist(rows, schema=columns.append(pa.field(STEP, pa.int32()))), letters


def released_rows(topic: str, bootstrap: str, steps: int) -> list[dict[str, Any]]:
    """The rows a Kafka sink released in steps 1..``steps``, each with its ``step``."""
    out = []
    for record in read_committed(bootstrap, topic):
        header = record.header("ftpipeline-step")
        step = int(header) if header is not None else 0
        if 0 < step <= steps:
            out.append({**json.loads(record.value or b"{}"), "step": step})
    return out
