"""The oracle: a run's output and dead letters checked against a plain PySpark batch job.

- ``expected.py``: the same pipeline as one batch job (the expected rows of
  every sink, and the expected dead letters);
- ``files.py``: file sources read again, independently of the runtime's reader;
- ``kafka.py``: Kafka topics read again: a source's records by step, a sink's released rows;
- ``delta.py``: a Delta table read again, by another implementation of Delta;
- ``compare.py``: multiset comparison, floats within a documented tolerance;
- ``buckets.py``: the same comparison for outputs too large to collect;
- ``truth.py``: the batch truth, which shares no rule of the watermark with
  the runtime (the oracle above recomputes the run's lateness from its own
  recorded watermarks: it proves the run self-consistent, the truth that it
  is right).

:func:`verify` is what ``ftpipeline run --verify`` and ``ftpipeline verify``
print; :func:`compare` checks the sinks alone.
"""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ftpipeline.barrier.objects import read_released
from ftpipeline.operators.late import read_late
from ftpipeline.oracle.buckets import compare_frames
from ftpipeline.oracle.compare import (
    FLOAT_ABS_TOL,
    FLOAT_REL_TOL,
    Comparison,
    compare_letters,
    compare_tables,
    read_dead_letters,
)
from ftpipeline.oracle.expected import Expected, expected, expected_outputs
from ftpipeline.oracle.delta import released_table
from ftpipeline.oracle.kafka import released_rows
from ftpipeline.oracle.truth import WHAT, ended, truth_frames
from ftpipeline.objectstore.base import ObjectStore
from ftpipeline.spec.model import PipelineSpec


def _topic(spark: Any, spec: PipelineSpec, name: str, frame: Any, topic: str, steps: int, work: Path) -> Comparison:
    """The rows released to a Kafka topic in steps 1..``steps`` against ``frame``."""
    from pyspark.sql import functions as F

    types = dict(frame.dtypes)
    rows = released_rows(topic, spec.kafka_bootstrap, steps)
    table = pa.Table.from_pylist([{c: r.get(c) for c in frame.columns} for r in rows]) if rows else None
    actual = spark.createDataFrame(table) if table is not None else frame.limit(0)
    actual = actual.select(*[F.col(c).cast(types[c]) for c in frame.columns])
    return compare_frames(name, frame, actual, len(rows), work)


def _released(spark: Any, spec: PipelineSpec, expect: Expected, steps: int, work: Path) -> list[Comparison]:
    from pyspark.sql import functions as F

    out = []
    for name, frame in expect.sinks.items():
        types = dict(frame.dtypes)
        topic = spec.stage(name).kafka_sink
        if topic is not None:
            out.append(_topic(spark, spec, name, frame, topic.topic, steps, work))
            continue
        if spec.stage(name).delta_sink is not None:  # its rows carry no step: steps 1..N as a whole
            found = released_table(spec, spec.stage(name), steps)
            frame = frame.drop("step")
            actual = spark.createDataFrame(found) if found is not None and found.num_rows else frame.limit(0)
            actual = actual.select(*[F.col(c).cast(types[c]) for c in frame.columns])
            out.append(compare_frames(name, frame, actual, found.num_rows if found is not None else 0, work))
            continue
        sink = spec.stage(name).sink
        assert sink is not None
        if isinstance(sink.path, str):  # an object store's: the files its commits name (``barrier/objects.py``)
            found = read_released(sink.path, steps)
            actual = spark.createDataFrame(found) if found.num_rows else frame.limit(0)
            rows = found.num_rows
        else:
            actual = spark.read.parquet(str(sink.path)).filter(F.col("step") <= steps)
            rows = sum(pq.ParquetFile(p).metadata.num_rows for p in sink.path.glob("step=*/*.parquet"))
        actual = actual.select(*[F.col(c).cast(types[c]) for c in frame.columns])
        out.append(compare_frames(name, frame, actual, rows, work))
    return out


def _late(spark: Any, spec: PipelineSpec, expect: Expected, steps: int, work: Path) -> list[Comparison]:
    """Each window's late-data output (``operators/late.py``, or a topic: ``barrier/late.py``) against the late
    rows the oracle expects."""
    from pyspark.sql import functions as F

    out = []
    for name, frame in expect.late.items():
        root, topic = spec.stage(name).late_data, spec.stage(name).late_topic
        if topic is not None:
            out.append(dataclasses.replace(_topic(spark, spec, name, frame, topic, steps, work), what="late data"))
        if root is None:
            continue
        found = read_late(root, name)  # a directory's files or a bucket's objects, with their step
        types = dict(frame.dtypes)
        if found is not None and found.num_rows:
            actual = spark.createDataFrame(found)
            actual = actual.filter(F.col("step") <= steps).select(*[F.col(c).cast(types[c]) for c in frame.columns])
        else:
            actual = frame.limit(0)
        rows = found.num_rows if found is not None else 0
        out.append(dataclasses.replace(compare_frames(name, frame, actual, rows, work), what="late data"))
    return out


def _truth(spark: Any, spec: PipelineSpec, expect: Expected, steps: int, work: Path) -> list[Comparison]:
    """Each sink against the batch truth (``truth.py``); a difference fails only where nothing was late."""
    frames, skipped = truth_frames(spark, spec, steps, work, expect)
    late = sum(f.count() for f in expect.late.values())
    note = (f"the run found {late:,} late records, so its input is not within its declared bounds; what "
            "differs is theirs" if late else "")
    out = [dataclasses.replace(c, what=WHAT, note=note, binding=not late)
           for c in _released(spark, spec, Expected(frames), steps, work)]
    return out + [Comparison(name, 0, 0, 0, 0, 0, what=WHAT, note=f"not compared: {why}", binding=False)
                  for name, why in skipped.items()]


def compare(spark: Any, spec: PipelineSpec, steps: int, history: ObjectStore | Path | None = None) -> list[Comparison]:
    """Compare every sink's released output for steps 1..``steps`` with the oracle (``history``: the run's
    step history, for a Kafka source)."""
    with tempfile.TemporaryDirectory(prefix="ftpipeline-oracle-") as work:
        return _released(spark, spec, expected(spark, spec, steps, Path(work), history), steps, Path(work))


def verify(spark: Any, spec: PipelineSpec, steps: int, dead_letter_root: Path | str,
           history: ObjectStore | Path | None = None) -> list[Comparison]:
    """Every sink, then the dead letters under ``dead_letter_root`` when the pipeline can have any."""
    with tempfile.TemporaryDirectory(prefix="ftpipeline-oracle-") as work:
        expect = expected(spark, spec, steps, Path(work), history)
        out = _released(spark, spec, expect, steps, Path(work))
        out += _late(spark, spec, expect, steps, Path(work))
        if spec.event_time and ended(expect, steps):
            out += _truth(spark, spec, expect, steps, Path(work))
    sources = {s.name for s in spec.stages if s.file is not None or s.kafka is not None}
    if sources or any(s.keeps_state for s in spec.stages):
        out.append(compare_letters(expect.letters, read_dead_letters(dead_letter_root, steps), sources))
    return out


__all__ = ["FLOAT_ABS_TOL", "FLOAT_REL_TOL", "Comparison", "compare", "compare_letters", "compare_tables",
           "expected", "expected_outputs", "read_dead_letters", "verify"]
