"""What a Delta sink's step may put into its table: its columns checked against the table's, its parts read as
one stream in the table's layout.

Why: delta-rs, which commits the steps (``delta.py``), casts an appended
column to the table's type without a word (1.9 into a ``long`` column is
stored as 1, the text "123" as 123). A sink must not change its rows, so
the release checks first, by Delta's own type names (``string`` whether
Arrow says ``string`` or ``large_string``; nullability aside), and refuses
as the user's error, naming the column:

- a column whose type differs from the table's;
- a column the table lacks, unless ``mergeSchema`` (then it is added);
- a type Delta cannot hold, or ``partitionBy`` columns the step lacks or the
  table is not partitioned by.

A column of the table the step lacks is written as nulls (as delta-spark
appends). Every column is nullable: Spark marks some outputs non-null (a
count, a literal), which must not make the table refuse a later null. The
channels' parts of one step are matched by column name, not position.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ftpipeline.objectstore.base import ObjectStore


class StepRefused(ValueError):
    """The table cannot take the step as it is: no retry helps."""


def _delta_types(schema: pa.Schema) -> dict[str, str]:
    """Each column's Delta type, nullability aside."""
    from deltalake import Schema

    nullable = pa.schema([f.with_nullable(True) for f in schema])
    try:
        fields = Schema.from_arrow(nullable).fields
    except Exception as exc:  # noqa: BLE001 - delta-rs raises a bare Exception for a type it cannot hold
        raise StepRefused(f"a column's type has no Delta equivalent: {str(exc).strip().splitlines()[0][:300]}") from None
    # nested types carry their elements' nullability in their names: aside, as the columns' own
    return {f.name: str(f.type).replace("=False", "=True") for f in fields}


def layout(step: pa.Schema, table: pa.Schema | None, partition_by: Sequence[str], table_partitions: Sequence[str],
           merge: bool) -> pa.Schema:
    """The schema the step is written in: the table's columns in its order (those the step lacks as nulls), then
    the step's new ones (``merge`` only); all nullable. ``table``: None when the step creates the table."""
    if missing := [c for c in partition_by if c not in step.names]:
        raise StepRefused(f"sink.delta.partitionBy names {missing}, which the step's rows do not have "
                          f"(they have {step.names})")
    if table is None:
        return pa.schema([f.with_nullable(True) for f in step])
    ours, theirs = _delta_types(step), _delta_types(table)
    if wrong := [f"{c} is {ours[c]} in the step, {theirs[c]} in the table" for c in ours if c in theirs
                 and ours[c] != theirs[c]]:
        raise StepRefused("; ".join(wrong))
    added = [c for c in step.names if c not in theirs]
    if added and not merge:
        raise StepRefused(f"the step adds columns {added} (schema evolution is off: sink.delta.mergeSchema)")
    if partition_by and list(partition_by) != list(table_partitions):
        raise StepRefused(f"sink.delta.partitionBy is {list(partition_by)}, the table is partitioned by "
                          f"{list(table_partitions)}")
    kept = [(table.field(c) if c not in step.names else step.field(c)) for c in table.names]
    return pa.schema([f.with_nullable(True) for f in [*kept, *(step.field(c) for c in added)]])


class StagedParts:
    """A step's staged parts (keys of ``store``), their schemas unified by name; ``batches(schema)`` streams
    them in a layout. On a volume they are read in place; from a bucket each is downloaded to a scratch
    directory first (never all in memory). Everything opened is closed on leaving, or on a failure to open."""

    def __init__(self, store: ObjectStore, keys: list[str]) -> None:
        self.store, self.keys = store, keys
        self.scratch: Path | None = None
        self.files: list[pq.ParquetFile] = []
        self.schema = pa.schema([])

    def __enter__(self) -> StagedParts:
        try:
            for key in self.keys:
                local = self.store.local_path(key)
                if local is None:
                    self.scratch = self.scratch or Path(tempfile.mkdtemp(prefix="ftpipeline-delta-release-"))
                    local = self.scratch / key.replace("/", "_")
                    self.store.download(key, local)
                self.files.append(pq.ParquetFile(local))
            try:
                self.schema = pa.unify_schemas([f.schema_arrow for f in self.files], promote_options="permissive")
            except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
                raise StepRefused(f"the channels' parts disagree on a column's type: {exc}") from None
        except BaseException:
            self.__exit__()
            raise
        return self

    def reader(self, schema: pa.Schema) -> pa.RecordBatchReader:
        def batches() -> Iterator[pa.RecordBatch]:
            for file in self.files:
                for batch in file.iter_batches():
                    yield pa.RecordBatch.from_arrays([_column(batch, f) for f in schema], schema=schema)

        return pa.RecordBatchReader.from_batches(schema, batches())

    def __exit__(self, *exc: object) -> None:
        for file in self.files:
            file.close()
        self.files = []
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)


def _column(batch: pa.RecordBatch, field: pa.Field) -> Any:
    index = batch.schema.get_field_index(field.name)
    if index < 0:
        return pa.nulls(batch.num_rows, field.type)
    column = batch.column(index)
    return column if column.type == field.type else column.cast(field.type)
