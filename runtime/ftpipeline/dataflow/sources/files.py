"""A directory of files as a replayable source: rows by offset, channels by file name.

Why it is built this way: a step is replayed by re-reading the offset range
``[lo, hi)`` the coordinator recorded for it, perhaps in another process after
a failure, so "offset -> row" must be a pure function of what is on disk:

* The directory's files, sorted by *name*, are dealt to the channels in
  turn: the i-th belongs to channel ``i % parallelism`` (a function of the
  names, never of listing or discovery order, so every process puts a file
  in the same channel). So two files share a channel only when every channel
  has one — a channel with none would read nothing and, with event time,
  say so (``eventtime/watch.py``) — and where names follow time (dated
  files), each channel's event time moves forward from one file to its next,
  as Flink's file source hands files out one per reader in order.
* Within a channel files are ordered by name, and its rows are numbered
  0, 1, 2, ... across them in that order. A file, once seen, is assumed
  immutable: appending to or rewriting a file already read is *not* supported
  (it renumbers rows). New files may appear between calls (``follow``) but
  must sort after every file already in the directory (e.g. timestamped
  names); a reader that sees its channel's file list change otherwise raises
  ``ValueError`` instead of silently shifting offsets. Writers should write
  to a name starting with ``.`` or ``_`` (ignored) and rename it into place.
* Every record consumes its offset, valid or not: a malformed record becomes
  a :class:`DeadLetter` at its offset, so replays give the same rows and the
  same dead letters.

Reads happen every step, so nothing re-parses whole files: the first time a
file is seen (keyed by path, size, mtime_ns) one pass records the byte span
and first physical line of every record (JSON Lines, CSV), and reads seek
straight to their rows. For Parquet the footer's row-group sizes play that
role and only the row groups covering the range are read.

What one row (offset) is, and when it is a dead letter instead:

* ``jsonl`` (``*.jsonl``, ``*.json``): one non-blank line. Invalid UTF-8 or
  JSON, a non-object, or a field of the wrong type is a dead letter: ``long``
  takes JSON integers (and integral floats like ``3.0``), ``double`` numbers,
  ``boolean`` ``true``/``false``, ``string`` strings. ``null`` and missing
  fields are null; other fields are ignored.
* ``csv``: one record after the header line, parsed by :mod:`csv` (quoted
  fields may hold commas and newlines); blank lines are not records. A wrong
  field count, a value that does not parse (booleans: ``true``/``false`` in
  any case), or a header lacking a schema column gives dead letters. An empty
  value is null, except in ``string`` columns where it stays ``""``.
* ``parquet``: one row. The schema's columns are selected and cast; with an
  empty schema each channel uses its first file's columns. A file missing a
  column raises ``ValueError`` (typed data has no per-row errors to route).

A dead letter carries the raw record and ``<file>:<line>``, the 1-based
physical line where the record starts.
"""

from __future__ import annotations

import csv
import json
import os
import re
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from ftpipeline.dataflow.sources.base import DeadLetter, OneSlotPerChannel, SourceBatch
from ftpipeline.dataflow.sources.jsonblock import BlockReader, parse_block
from ftpipeline.spec.model import FileSource

ARROW_TYPES: dict[str, pa.DataType] = {
    "string": pa.string(), "long": pa.int64(), "double": pa.float64(), "boolean": pa.bool_(),
}
SUFFIXES: dict[str, tuple[str, ...]] = {"jsonl": (".jsonl", ".json"), "csv": (".csv",), "parquet": (".parquet",)}
_INTEGER = re.compile(r"[+-]?\d+")
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1

Value = str | int | float | bool | None


class BadRecord(ValueError):
    """A record that becomes a dead letter; the message is the reason."""


@dataclass(frozen=True)
class _TextIndex:
    """Where each record of a JSON Lines or CSV file lies."""

    stamp: tuple[int, int]          # (size, mtime_ns) the index was built for
    starts: array[int]              # byte offset where each record begins
    ends: array[int]                # byte offset just past each record
    lines: array[int]               # 1-based physical line where each record begins
    header: tuple[str, ...] = ()    # csv only

    @property
    def rows(self) -> int:
        return len(self.starts)


@dataclass(frozen=True)
class _ParquetIndex:
    stamp: tuple[int, int]
    group_rows: tuple[int, ...]     # rows of each row group
    schema: pa.Schema

    @property
    def rows(self) -> int:
        return sum(self.group_rows)


def _build_text_index(path: Path, fmt: str, stamp: tuple[int, int]) -> _TextIndex:
    """One pass over a JSON Lines or CSV file, recording each record's byte span and line."""
    starts, ends, lines = array("q"), array("q"), array("q")
    pos = 0
    with path.open("rb") as fh:
        if fmt == "jsonl":
            for number, raw in enumerate(fh, 1):
                if raw.strip():
                    starts.append(pos)
                    ends.append(pos + len(raw))
                    lines.append(number)
                pos += len(raw)
            return _TextIndex(stamp, starts, ends, lines)

        def decoded() -> Iterator[str]:
            nonlocal pos
            for raw in fh:
                pos += len(raw)     # csv pulls lines lazily: pos is the end of the last one it took
                yield raw.decode("utf-8", errors="replace")

        reader = csv.reader(decoded())
        header = tuple(next(reader, ()))
        if header:
            header = (header[0].removeprefix("\ufeff"),) + header[1:]
        begin, consumed = pos, reader.line_num
        for record in reader:
            if record:
                starts.append(begin)
                ends.append(pos)
                lines.append(consumed + 1)
            begin, consumed = pos, reader.line_num
    return _TextIndex(stamp, starts, ends, lines, header)


def _build_parquet_index(path: Path, stamp: tuple[int, int]) -> _ParquetIndex:
    with pq.ParquetFile(path) as pf:
        meta = pf.metadata
        groups = tuple(meta.row_group(i).num_rows for i in range(meta.num_row_groups))
        return _ParquetIndex(stamp, groups, pf.schema_arrow)


def _show(value: object) -> str:
    text = repr(value) if isinstance(value, str) else json.dumps(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _json_value(name: str, kind: str, value: object) -> Value:
    if value is None:
        return None
    if kind == "string" and isinstance(value, str):
        if not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:  # a lone surrogate escape ("\ud800"): no Unicode text has one
                raise BadRecord(f"field '{name}': not valid Unicode text (a lone surrogate)") from None
        return value
    if kind == "boolean" and isinstance(value, bool):
        return value
    if not isinstance(value, bool):
        if kind == "long":
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            if isinstance(value, int) and _LONG_MIN <= value <= _LONG_MAX:
                return value
        elif kind == "double" and isinstance(value, int | float):
            try:
                return float(value)
            except OverflowError:
                pass
    raise BadRecord(f"field '{name}': expected {kind}, got {_show(value)}")


def json_row(raw: bytes, schema: Sequence[tuple[str, str]]) -> list[Value]:
    """The schema's columns of one JSON object (a JSON Lines line, a Kafka record's value); a record that is
    not one raises :class:`BadRecord` naming why."""
    try:
        obj = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as error:
        raise BadRecord(f"not valid UTF-8: {error}") from None
    except ValueError as error:
        raise BadRecord(f"not valid JSON: {error}") from None
    if not isinstance(obj, dict):
        raise BadRecord(f"not a JSON object: got {_show(obj)}")
    return [_json_value(name, kind, obj.get(name)) for name, kind in schema]


def _csv_value(name: str, kind: str, text: str) -> Value:
    if kind == "string":
        return text
    if text == "":
        return None
    stripped = text.strip()
    if kind == "long" and _INTEGER.fullmatch(stripped) and _LONG_MIN <= int(stripped) <= _LONG_MAX:
        return int(stripped)
    if kind == "double" and "_" not in stripped:
        try:
            return float(stripped)
        except ValueError:
            pass
    if kind == "boolean" and stripped.lower() in ("true", "false"):
        return stripped.lower() == "true"
    raise BadRecord(f"field '{name}': expected {kind}, got {text!r}")


def _physical_lines(text: str) -> list[str]:
    """Split like the index pass (on ``\\n`` only, keeping it) so csv sees the same lines."""
    parts = text.split("\n")
    return [part + "\n" for part in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


class FileSourceReader(OneSlotPerChannel):
    """The :class:`~ftpipeline.dataflow.sources.base.SourceReader` of a ``file`` source."""

    def __init__(self, spec: FileSource, parallelism: int) -> None:
        if parallelism < 1:
            raise ValueError(f"parallelism must be at least 1, got {parallelism}")
        if spec.format not in SUFFIXES:
            raise ValueError(f"unknown file format {spec.format!r}")
        if spec.format != "parquet" and not spec.schema:
            raise ValueError(f"a {spec.format} source needs a schema")
        unknown = [f"{n}: {t}" for n, t in spec.schema if t not in ARROW_TYPES]
        if unknown:
            raise ValueError(f"unknown column types: {', '.join(unknown)}")
        self.spec = spec
        self.parallelism = parallelism
        self._schema = pa.schema([pa.field(name, ARROW_TYPES[kind]) for name, kind in spec.schema])
        self._blocks = BlockReader()  # JSON Lines: Arrow's reader where it is sure (jsonblock.py)
        self._indexes: dict[Path, _TextIndex | _ParquetIndex] = {}
        self._listed: dict[int, list[Path]] = {}     # channel -> files last returned

    # -- layout ------------------------------------------------------------

    def files(self, channel: int) -> list[Path]:
        """This channel's files, sorted by name."""
        if not 0 <= channel < self.parallelism:
            raise ValueError(f"channel {channel} outside 0..{self.parallelism - 1}")
        try:
            names = os.listdir(self.spec.path)
        except FileNotFoundError:
            if not self.spec.follow:
                raise
            names = []
        suffixes = SUFFIXES[self.spec.format]
        chosen = sorted(
            name for name in names
            if not name.startswith((".", "_")) and name.endswith(suffixes) and (self.spec.path / name).is_file()
        )[channel::self.parallelism]  # dealt in turn, in name order
        paths = [self.spec.path / name for name in chosen]
        before = self._listed.get(channel, [])
        if paths[: len(before)] != before:
            raise ValueError(
                f"files of channel {channel} in {self.spec.path} changed: had {[p.name for p in before]}, "
                f"now {chosen}; only files sorting after the existing ones may be added"
            )
        self._listed[channel] = paths
        return paths

    def _index(self, path: Path) -> _TextIndex | _ParquetIndex:
        st = path.stat()
        stamp = (st.st_size, st.st_mtime_ns)
        cached = self._indexes.get(path)
        if cached is None or cached.stamp != stamp:
            if self.spec.format == "parquet":
                cached = _build_parquet_index(path, stamp)
            else:
                cached = _build_text_index(path, self.spec.format, stamp)
            self._indexes[path] = cached
        return cached

    def _layout(self, channel: int) -> list[tuple[Path, int]]:
        return [(path, self._index(path).rows) for path in self.files(channel)]

    # -- SourceReader --------------------------------------------------------

    def available(self, channel: int, start: int) -> int | None:
        total = sum(rows for _, rows in self._layout(channel))
        return max(0, total - start)

    def exhausted(self, channel: int, start: int) -> bool:
        if self.spec.follow:
            return False
        return start >= sum(rows for _, rows in self._layout(channel))

    def read(self, channel: int, step: int, lo: int, hi: int) -> SourceBatch:
        """Rows ``[lo, hi)`` of ``channel``; ``step`` does not matter, the range alone decides."""
        if not 0 <= lo <= hi:
            raise ValueError(f"bad row range [{lo}, {hi})")
        layout = self._layout(channel)
        total = sum(rows for _, rows in layout)
        if hi > total:
            raise ValueError(f"rows [{lo}, {hi}) of channel {channel}: only {total} available")
        schema = self._target_schema(layout)
        pieces: list[pa.Table] = []
        dead: list[DeadLetter] = []
        first = 0
        for path, rows in layout:
            a, b = max(lo, first), min(hi, first + rows)
            if a < b:
                if self.spec.format == "parquet":
                    pieces.append(self._read_parquet(path, a - first, b - first, schema))
                else:
                    pieces.append(self._read_text(path, a - first, b - first, dead))
            first += rows
            if first >= hi:
                break
        table = pa.concat_tables(pieces) if pieces else schema.empty_table()
        return SourceBatch(table, dead)

    # -- formats -------------------------------------------------------------

    def _target_schema(self, layout: Sequence[tuple[Path, int]]) -> pa.Schema:
        if self.spec.schema or not layout:
            return self._schema
        index = self._index(layout[0][0])
        assert isinstance(index, _ParquetIndex)
        return index.schema

    def _read_parquet(self, path: Path, a: int, b: int, schema: pa.Schema) -> pa.Table:
        index = self._index(path)
        assert isinstance(index, _ParquetIndex)
        missing = [name for name in schema.names if name not in index.schema.names]
        if missing:
            raise ValueError(f"{path}: no column {missing[0]!r}")
        groups: list[int] = []
        skip, first = 0, 0
        for number, rows in enumerate(index.group_rows):
            if first < b and first + rows > a:
                if not groups:
                    skip = a - first
                groups.append(number)
            first += rows
        with pq.ParquetFile(path) as pf:
            table = pf.read_row_groups(groups, columns=schema.names).slice(skip, b - a)
        try:
            return table.select(schema.names).cast(schema)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as error:
            raise ValueError(f"{path}: columns do not fit the schema: {error}") from error

    def _read_text(self, path: Path, a: int, b: int, dead: list[DeadLetter]) -> pa.Table:
        index = self._index(path)
        assert isinstance(index, _TextIndex)
        base = index.starts[a]
        with path.open("rb") as fh:
            fh.seek(base)
            blob = fh.read(index.ends[b - 1] - base)
        positions = [index.header.index(n) if n in index.header else -1 for n, _ in self.spec.schema]

        def one_by_one(i: int, j: int) -> pa.Table:  # records [a+i, a+j)
            columns: list[list[Value]] = [[] for _ in self.spec.schema]
            for r in range(a + i, a + j):
                raw = blob[index.starts[r] - base: index.ends[r] - base]
                text = raw.decode("utf-8", errors="replace").rstrip("\r\n")
                try:
                    if self.spec.format == "jsonl":
                        values = self._parse_json(raw)
                    else:
                        values = self._parse_csv(text, index.header, positions)
                except BadRecord as bad:
                    dead.append(DeadLetter(text, str(bad), f"{path}:{index.lines[r]}"))
                    continue
                for column, value in zip(columns, values):
                    column.append(value)
            arrays = [pa.array(values, type=field.type) for values, field in zip(columns, self._schema)]
            return pa.Table.from_arrays(arrays, schema=self._schema)

        if self.spec.format != "jsonl":
            return one_by_one(0, b - a)
        # JSON Lines: the records' lines as one block for Arrow's reader, where it is sure (jsonblock.py)
        return self._blocks.read(b - a, lambda i, j: parse_block(
            blob[index.starts[a + i] - base: index.ends[a + j - 1] - base].rstrip(b"\r\n"), j - i, self._schema),
            one_by_one)  # (a record is a line that is not blank: its end is not part of it)

    def _parse_json(self, raw: bytes) -> list[Value]:
        return json_row(raw, self.spec.schema)

    def _parse_csv(self, text: str, header: tuple[str, ...], positions: list[int]) -> list[Value]:
        missing = [name for (name, _), p in zip(self.spec.schema, positions) if p < 0]
        if missing:
            raise BadRecord(f"header has no column {missing[0]!r}")
        try:
            fields = next(csv.reader(_physical_lines(text)), [])
        except csv.Error as error:
            raise BadRecord(f"not valid CSV: {error}") from None
        if len(fields) != len(header):
            raise BadRecord(f"expected {len(header)} fields as in the header, got {len(fields)}")
        return [_csv_value(name, kind, fields[p]) for (name, kind), p in zip(self.spec.schema, positions)]
