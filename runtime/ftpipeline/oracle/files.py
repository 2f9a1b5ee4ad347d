"""The oracle's own reading of a ``file`` source: every record with its step, and the malformed ones.

Why a second reader: ``verify`` must not trust the code it checks. The
runtime's reader (``dataflow/sources/files.py``) indexes byte spans, seeks to
offset ranges and caches; a bug there (a skipped record, a row counted in two
steps) would put the same mistake into the expected output and cancel out.
This module reads each file whole, front to back, with the standard library
and pyarrow only, and derives everything from the documented rules of the
source, not from the runtime's code:

- the i-th file by name belongs to channel ``i % parallelism``; a channel's files
  are read in name order (names starting with ``.`` or ``_`` are ignored);
- a channel's records are numbered 0, 1, 2, ... across its files; step ``k``
  holds records ``[(k-1)*share, k*share)`` where ``share`` is the channel's
  even split of ``rowsPerStep`` (the first channels take the remainder);
- a record is a non-blank line (JSON Lines), a non-empty CSV record after the
  header, or a Parquet row; the typing rules of ``spec.stages[].source.file
  .schema`` decide whether it is a row or a dead letter.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ftpipeline.spec.model import StageSpec

STEP = "_step"
_TYPES = {"string": pa.string(), "long": pa.int64(), "double": pa.float64(), "boolean": pa.bool_()}
_ENDINGS = {"jsonl": (".jsonl", ".json"), "csv": (".csv",), "parquet": (".parquet",)}


@dataclass(frozen=True)
class Letter:
    """One dead letter as the output records it (the reason's wording is not compared)."""

    stage: str
    step: int
    location: str
    record: str


class _Malformed(Exception):
    pass


def _long(v: Any) -> int:
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if isinstance(v, bool) or not isinstance(v, int) or not -(2**63) <= v < 2**63:
        raise _Malformed
    return v


def _double(v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise _Malformed
    return float(v)  # an int too large for a double raises OverflowError: malformed too


_FROM_JSON: dict[str, Callable[[Any], Any]] = {
    "string": lambda v: v if isinstance(v, str) else _raise(),
    "boolean": lambda v: v if isinstance(v, bool) else _raise(),
    "long": _long,
    "double": _double,
}


def types_of(schema: list[tuple[str, str]]) -> pa.Schema:
    return pa.schema([(n, _TYPES[k]) for n, k in schema])


def _raise() -> Any:
    raise _Malformed


def _from_csv(kind: str, text: str) -> Any:
    if kind == "string":
        return text
    if text == "":
        return None
    t = text.strip()
    if kind == "long":
        if re.fullmatch(r"[+-]?[0-9]+", t) and -(2**63) <= int(t) < 2**63:
            return int(t)
    elif kind == "double":
        if "_" not in t:
            try:
                return float(t)
            except ValueError:
                pass
    elif t.lower() in ("true", "false"):
        return t.lower() == "true"
    raise _Malformed


def _lines(data: bytes) -> Iterator[tuple[int, bytes]]:
    """(1-based line number, line with its ending), split on ``\\n`` only."""
    pieces = data.split(b"\n")
    for number, piece in enumerate(pieces, 1):
        if number < len(pieces):
            yield number, piece + b"\n"
        elif piece:
            yield number, piece


def json_row(raw: bytes, schema: list[tuple[str, str]]) -> dict[str, Any] | None:
    """The schema's columns of one JSON object, or None when ``raw`` is not one whose columns have their types."""
    try:
        obj = json.loads(raw.decode("utf-8"))
        if not isinstance(obj, dict):
            raise _Malformed
        return {n: None if obj.get(n) is None else _FROM_JSON[k](obj[n]) for n, k in schema}
    except (_Malformed, ValueError, OverflowError):
        return None


def _jsonl(path: Path, schema: list[tuple[str, str]]) -> Iterator[tuple[dict[str, Any] | None, str, int]]:
    for number, raw in _lines(path.read_bytes()):
        if not raw.strip():
            continue
        yield json_row(raw, schema), raw.decode("utf-8", errors="replace").rstrip("\r\n"), number


def _csv(path: Path, schema: list[tuple[str, str]]) -> Iterator[tuple[dict[str, Any] | None, str, int]]:
    lines = list(_lines(path.read_bytes()))
    taken: list[str] = []

    def feed() -> Iterator[str]:
        for _, raw in lines:
            line = raw.decode("utf-8", errors="replace")
            taken.append(line)
            yield line

    reader = csv.reader(feed())
    header = next(reader, [])
    if header:
        header[0] = header[0].removeprefix("\ufeff")
    taken.clear()
    first_line = reader.line_num + 1
    for fields in reader:
        text = "".join(taken).rstrip("\r\n")
        start, first_line = first_line, reader.line_num + 1
        taken.clear()
        if not fields:
            continue
        try:
            if len(fields) != len(header) or any(n not in header for n, _ in schema):
                raise _Malformed
            row = {n: _from_csv(k, fields[header.index(n)]) for n, k in schema}
        except _Malformed:
            yield None, text, start
            continue
        yield row, text, start


def read_file_stage(stage: StageSpec, steps: int) -> tuple[pa.Table, list[Letter]]:
    """Every row of steps 1..``steps`` of a file source (with a ``_step`` column), and its dead letters."""
    spec = stage.file
    assert spec is not None
    schema = [(n, k) for n, k in spec.schema]
    p = stage.parallelism
    names = sorted(n for n in (f.name for f in spec.path.iterdir() if f.is_file())
                   if not n.startswith((".", "_")) and n.endswith(_ENDINGS[spec.format]))
    rows: list[dict[str, Any]] = []
    letters: list[Letter] = []
    tables: list[pa.Table] = []
    declared = types_of(schema) if schema else None
    for channel in range(p):
        share = spec.rows_per_step // p + (1 if channel < spec.rows_per_step % p else 0)
        offset = 0
        columns = declared  # Parquet without a schema: the channel's first file's columns
        for name in names[channel::p]:  # the i-th file by name belongs to channel i mod p
            path = spec.path / name
            if spec.format == "parquet":
                table = pq.read_table(path)
                columns = columns or table.schema
                table = table.select(columns.names).cast(columns)
                step = [(offset + i) // share + 1 for i in range(table.num_rows)]
                tables.append(table.append_column(STEP, pa.array(step, pa.int32())))
                offset += table.num_rows
                continue
            records = _jsonl(path, schema) if spec.format == "jsonl" else _csv(path, schema)
            for row, text, line in records:
                step_of = offset // share + 1
                offset += 1
                if row is None:
                    letters.append(Letter(stage.name, step_of, f"{path}:{line}", text))
                else:
                    rows.append({**row, STEP: step_of})
    if rows:
        assert declared is not None
        tables.append(pa.Table.from_pylist(rows, schema=declared.append(pa.field(STEP, pa.int32()))))
    if not tables:  # every record malformed, or no file yet
        if declared is None:
            raise ValueError(f"stage {stage.name!r}: no Parquet file in {spec.path} to take columns from")
        tables.append(declared.append(pa.field(STEP, pa.int32())).empty_table())
    table = pa.concat_tables(tables, promote_options="permissive")
    keep = pc.less_equal(table[STEP], steps)
    return table.filter(keep), [letter for letter in letters if letter.step <= steps]
