"""A stream joined to a table (a ``lookup`` stage): each step reads the table at the version it recorded.

A table that changes while the pipeline runs (a Delta table that another
job appends to, updates, compacts) would give a replayed step other rows
than the step had: a lost worker's re-run, a rollback, a resumed run would
each join against whatever the table holds then. So the coordinator decides
the version when it triggers a step, as it decides the step's offsets and
watermark, and records it with them (the step log, the command log, the
checkpoint's manifest, the step history); a task reads that version:

- **Delta**: the table's newest version when the step starts; a task reads
  it by time travel (delta-rs), so a replay reads the very same files, as
  long as the table's log and files of that version are kept (a VACUUM that
  removed them fails the replay, naming the version).
- **Compacted Kafka topic**: each partition's end when the step starts,
  as the workers report them; a worker keeps a copy of the table and reads
  on from where it was (``lookup_kafka.py``, which says what compaction
  limits).
- **Parquet directory**: no versions to travel to, so it must not change
  while the pipeline runs. Its version is a digest of its listing (names
  and sizes); a task that finds another listing than its step recorded
  fails, naming the directory (use Delta for a table that changes).

A worker keeps the tables it read, by version (``LookupTables``): a step
costs one read of the table when its version is new, else none. The join
itself is Arrow's hash join: each row with every table row of equal keys
(``inner``), or also alone, with nulls (``left``).
"""

from __future__ import annotations

import hashlib
import io
from datetime import datetime, timezone
from pathlib import Path
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ftpipeline.dataflow.lookup_kafka import KafkaTable, ends_of as kafka_ends, version as kafka_version
from ftpipeline.objectstore.base import ObjectStore, is_remote, open_store
from ftpipeline.spec.model import ProcessOp, StageSpec

KEPT = 2  # versions of one table a worker keeps in memory


def _delta(path: Path | str, version: int | None = None) -> Any:
    from deltalake import DeltaTable

    from ftpipeline.objectstore.config import storage_options

    options = storage_options(None) if is_remote(str(path)) else {}
    return DeltaTable(str(path), version=version, storage_options=options or None)


def _parquet(store: ObjectStore, listing: list[tuple[str, int]]) -> pa.Table:
    tables = [pq.read_table(store.local_path(k) or io.BytesIO(store.get(k))) for k, _ in listing]
    return pa.concat_tables(tables, promote_options="permissive") if tables else pa.table({})


def initial_state(op: ProcessOp, field: str, at_us: int) -> pa.Table:
    """A keyed function's initial state table (``process.initialState``): a Delta table as it was at ``at_us``
    (the first step's recorded processing time: a replay reads the same version), or a Parquet directory."""
    if op.initial_delta is not None:
        try:
            table = _delta(op.initial_delta)
            table.load_as_version(datetime.fromtimestamp(at_us / 1e6, timezone.utc))
            return table.to_pyarrow_table()
        except Exception as exc:
            raise RuntimeError(f"{field}.delta: {op.initial_delta} cannot be read as of "
                               f"{datetime.fromtimestamp(at_us / 1e6, timezone.utc).isoformat()} (the first "
                               f"step's time): {type(exc).__name__}: {exc}") from exc
    assert op.initial_parquet is not None
    store = open_store(op.initial_parquet)
    return _parquet(store, _listing(store))


def _listing(store: ObjectStore) -> list[tuple[str, int]]:
    """The directory's Parquet files and their sizes, from one listing (no object is read)."""
    return sorted((k, n) for k, n in store.sizes().items()
                  if k.endswith(".parquet") and not k.split("/")[-1].startswith(("_", ".")))


class TableVersions:
    """The coordinator's view of the lookup stages' tables: the version a step starting now reads, a Delta
    table's newest (its log opened once, then read on from where it was), a Kafka topic's ends as the workers
    last reported them, or a Parquet directory's listing digest."""

    def __init__(self, stages: Iterable[StageSpec]) -> None:
        self.stages = list(stages)
        self._delta: dict[str, Any] = {}
        self._kafka: dict[str, dict[int, int]] = {}  # stage -> each partition's largest end reported

    def reported(self, stage: str, ends: dict[int, int]) -> None:
        """A worker's look at a Kafka table's ends: an end never goes back (a late report changes nothing)."""
        if not any(s.name == stage for s in self.stages):
            return
        mine = self._kafka.setdefault(stage, {})
        for partition, end in ends.items():
            mine[partition] = max(end, mine.get(partition, 0))

    def ready(self) -> bool:
        """Can a step start: has every Kafka table been reported (a step before that would join nothing)?"""
        return all(s.name in self._kafka for s in self.stages if s.table_topic is not None)

    def now(self) -> dict[str, int | str]:
        return {s.name: self._version(s) for s in self.stages}

    def _version(self, stage: StageSpec) -> int | str:
        op = stage.lookup
        assert op is not None
        if op.kafka is not None:
            return kafka_version(self._kafka[stage.name])
        if op.delta is not None:
            table = self._delta.get(stage.name)
            if table is None:
                table = self._delta[stage.name] = _delta(op.path)
            else:
                table.update_incremental()
            return int(table.version())
        return hashlib.sha256(repr(_listing(open_store(op.path))).encode()).hexdigest()[:16]


class LookupTables:
    """The tables a worker's lookup stages join, each read once per version (a Kafka table kept as a copy
    brought forward from one version to the next)."""

    def __init__(self, kafka_bootstrap: str = "") -> None:
        self._tables: OrderedDict[tuple[str, int | str], pa.Table] = OrderedDict()
        self._bootstrap = kafka_bootstrap
        self._kafka: dict[str, KafkaTable] = {}

    def close(self) -> None:
        for table in self._kafka.values():
            table.close()
        self._kafka.clear()

    def table(self, stage: StageSpec, version: int | str) -> pa.Table:
        key = (stage.name, version)
        found = self._tables.get(key)
        if found is None:
            found = self._read(stage, version)
            self._tables[key] = found
            mine = [k for k in self._tables if k[0] == stage.name]
            for old in mine[:-KEPT]:
                del self._tables[old]
        self._tables.move_to_end(key)
        return found

    def _read(self, stage: StageSpec, version: int | str) -> pa.Table:
        op = stage.lookup
        assert op is not None
        if op.kafka is not None:
            copy = self._kafka.get(stage.name)
            if copy is None:
                copy = self._kafka[stage.name] = KafkaTable(stage.name, op.kafka, self._bootstrap)
            return copy.at(kafka_ends(str(version)))
        if op.delta is not None:
            try:
                return _delta(op.path, int(version)).to_pyarrow_table()
            except Exception as exc:
                raise RuntimeError(f"stage {stage.name!r} lookup.table.delta: version {version} of {op.delta} cannot "
                                   f"be read ({type(exc).__name__}: {exc}); a replayed step needs the version it "
                                   "recorded (keep its log and files: no VACUUM below it while the pipeline runs)"
                                   ) from exc
        store = open_store(op.path)
        listing = _listing(store)
        if hashlib.sha256(repr(listing).encode()).hexdigest()[:16] != version:
            raise RuntimeError(f"stage {stage.name!r} lookup.table.parquet: {op.parquet} changed since the step "
                               "started; a Parquet table must not change while the pipeline reads it (use a Delta "
                               "table for one that does)")
        return _parquet(store, listing)


def joined(stage: StageSpec, rows: pa.Table, table: pa.Table) -> pa.Table:
    """``rows`` joined to ``table`` on the stage's keys: the rows' columns, then the table's others."""
    op = stage.lookup
    assert op is not None
    keys = list(op.keys)
    for key in keys:
        if key not in table.column_names:
            raise ValueError(f"stage {stage.name!r} lookup.keys: the table has no column {key!r} "
                             f"(its columns: {', '.join(table.column_names)})")
        mine, theirs = rows.schema.field(key).type, table.schema.field(key).type
        if mine != theirs:
            table = table.set_column(table.schema.get_field_index(key), key, table.column(key).cast(mine))
    others = [c for c in table.column_names if c not in keys]
    renamed = {c: (f"table_{c}" if c in rows.column_names else c) for c in others}
    right = table.select([*keys, *others]).rename_columns([*keys, *(renamed[c] for c in others)])
    out = rows.join(right, keys, join_type="inner" if op.kind == "inner" else "left outer", use_threads=False,
                    coalesce_keys=True)
    return out.select([*rows.column_names, *(renamed[c] for c in others)])
