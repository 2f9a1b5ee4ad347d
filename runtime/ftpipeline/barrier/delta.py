"""The output barrier for a Delta Lake table: each step is one Delta commit whose transaction is the step.

The Parquet barrier's protocol (``bundles.py``) with Delta doing the atomic
part. Delta records, in the same commit as the rows, an application's
transaction version (``txnAppId``, ``txnVersion``), and skips a write whose
version is not above the one recorded: that recorded version *is* the
sink's ``GT_last``. The application id is the pipeline's identity (the name
Redis and ZooKeeper know it by) and the sink's name; the version is the step.

    staged   each sink task's part, one Parquet file per channel under
             ``<table>/_ftpipeline_staging/step=S/`` (written to a temporary
             name, then renamed; Delta's readers and VACUUM leave names that
             start with ``_`` alone), on storage every worker reaches
    release  read GT_last; when it is S-1, the releasing worker's Spark
             process appends every part of S in one write with txnVersion S
             (``write_step``: delta-spark); then the staged step is dropped
    replay   a step at or below GT_last is not written again (checked here,
             and Delta would skip it anyway)

States of one step::

    staged --write_step commits--> released (GT_last = S)
    staged --crash before the commit--> staged   (nothing of it is in the table: the next release writes it)
    staged --crash after the commit--> released  (the next release finds GT_last = S and drops the parts)
    released --release again (replay)--> released (skipped)

Steps are released in order, so GT_last is S-1 when S comes. Every step is
a commit, empty or not, so GT_last moves with the steps. A worker the run
fenced off cannot release (the sidecar refuses it, as for Kafka); were its
late write to land anyway, Delta would refuse or skip it: its version is
one the table already holds, or the same rows the release would write.

Schema evolution is off unless ``mergeSchema`` asks for it: a step whose
schema the table does not take fails the run with an error naming that
field, and nothing of the step is written. The table's ``GT_last`` is read
without a JVM, by delta-rs (``deltalake``): the sidecar has no Spark.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from ftpipeline.barrier.bundles import staged_parts, write_part_file
from ftpipeline.lineage.naming import store_user
from ftpipeline.obs.crash import CrashPoint
from ftpipeline.spec.model import DeltaSink, PipelineSpec

STAGING = "_ftpipeline_staging"
# what a Spark session needs for Delta (besides its jars, embedded/jars.py): the SQL extension and catalog,
# and few partitions for reading the table's log (the defaults take seconds per small commit on two cores)
SPARK_SETTINGS = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    "spark.databricks.delta.snapshotPartitions": "2",
}


def spark_settings(conf: Mapping[str, str], delta: bool) -> dict[str, str]:
    """A pipeline's Spark settings, with Delta's when it has a Delta sink (its Spark processes then put the
    pinned jars on their class path: ``worker/session.build_session``)."""
    return {**SPARK_SETTINGS, **conf} if delta else dict(conf)


def wants_delta(conf: Mapping[str, str]) -> bool:
    return SPARK_SETTINGS["spark.sql.extensions"] in conf.get("spark.sql.extensions", "")


class DeltaReleaseError(RuntimeError):
    """A step could not be released to its table; ``user`` when retrying cannot help (a schema the table
    refuses): the run fails with the message."""

    def __init__(self, message: str, user: bool = False) -> None:
        super().__init__(message)
        self.user = user


@dataclass(frozen=True)
class StepWrite:
    """One step of one sink, as the releasing worker's Spark process writes it."""

    sink: str
    table: str
    app_id: str
    step: int
    parts: tuple[str, ...]
    partition_by: tuple[str, ...]
    merge_schema: bool

    def to_json(self) -> dict[str, Any]:
        return {"sink": self.sink, "table": self.table, "app_id": self.app_id, "step": self.step,
                "parts": list(self.parts), "partition_by": list(self.partition_by), "merge_schema": self.merge_schema}

    @staticmethod
    def from_json(doc: dict[str, Any]) -> StepWrite:
        return StepWrite(doc["sink"], doc["table"], doc["app_id"], int(doc["step"]), tuple(doc["parts"]),
                         tuple(doc["partition_by"]), bool(doc["merge_schema"]))


def write_step(spark: Any, write: StepWrite) -> None:
    """The Spark process's side: append the step's parts to the table in one commit, with the step as the
    transaction version (delta-spark skips it when the table already holds it)."""
    from pyspark.errors import AnalysisException

    frame = spark.read.parquet(*write.parts)
    writer = (frame.write.format("delta").mode("append")
              .option("txnAppId", write.app_id).option("txnVersion", write.step))
    if write.merge_schema:
        writer = writer.option("mergeSchema", "true")
    if write.partition_by:
        writer = writer.partitionBy(*write.partition_by)
    try:
        writer.save(write.table)
    except AnalysisException as exc:  # the table refuses the step's schema (or its partitioning)
        first = str(exc).strip().splitlines()[0]
        raise DeltaReleaseError(f"sink {write.sink}: table {write.table} refuses step {write.step}: {first}"
                                f"{'' if write.merge_schema else ' (schema evolution is off: sink.delta.mergeSchema)'}",
                                user=True) from None


def transaction_version(table: Path, app_id: str, version: int | None = None) -> int:
    """The newest step ``app_id`` committed to ``table`` (0: none, or no table yet), at ``version``."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        dt = DeltaTable(str(table), version=version)
    except TableNotFoundError:
        return 0
    return int(dt.transaction_version(app_id) or 0)


def version_of_step(table: Path, app_id: str, step: int) -> int | None:
    """The table version whose commit holds ``step`` of ``app_id`` (the newest version at or below it), or
    None: the oracle reads the table as it was then. Versions only add steps, so a bisection finds it."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        newest = DeltaTable(str(table)).version()
    except TableNotFoundError:
        return None
    lo, hi = 0, newest
    if transaction_version(table, app_id, lo) > step:
        return None
    while lo < hi:  # the largest version whose transaction version is at most step
        mid = (lo + hi + 1) // 2
        if transaction_version(table, app_id, mid) <= step:
            lo = mid
        else:
            hi = mid - 1
    return lo


class DeltaBarrier:
    """The barrier of one Delta sink; ``write`` runs a step's write (the sidecar: in its Spark process)."""

    def __init__(self, name: str, sink: DeltaSink, spec: PipelineSpec,
                 write: Callable[[StepWrite], None] | None = None, crash: CrashPoint | None = None) -> None:
        self.name, self.sink, self.write = name, sink, write
        self.crash = crash  # tests: exit between the commit and the release's answer (obs/crash.py)
        self.app_id = f"{store_user(spec.store_key)}-{name}"  # the name Redis and ZooKeeper know the pipeline by
        self.staging = sink.path / STAGING

    # -- staging (the executor, when a sink task completes) ------------------------

    def stage_batches(self, step: int, channel: int, schema: pa.Schema, tables: Iterable[pa.Table]) -> None:
        """Stage one channel's part of ``step`` (a re-run overwrites it with the same rows)."""
        write_part_file(self.staging / f"step={step}", channel, schema, tables)

    def _drop_staged(self, up_to: int) -> None:
        """Staged steps at or below ``up_to``: released, or staged again by a replay of a step already
        released (a rollback re-runs the steps after its cut), which no release will take."""
        if not self.staging.is_dir():
            return
        for entry in self.staging.iterdir():
            if entry.name.startswith("step=") and int(entry.name[5:]) <= up_to:
                shutil.rmtree(entry, ignore_errors=True)

    def clear_staging(self) -> None:
        shutil.rmtree(self.staging, ignore_errors=True)

    # -- the barrier --------------------------------------------------------------

    def gt_last(self) -> int:
        return transaction_version(self.sink.path, self.app_id)

    def release(self, step: int, channels: int) -> bool:
        """Release ``step``; False when the table already holds it (idempotent)."""
        done = self.gt_last()
        if done >= step:
            self._drop_staged(step)
            return False
        if done != step - 1:
            raise DeltaReleaseError(f"barrier: cannot release step {step} of sink {self.name} before step {done + 1}")
        directory = self.staging / f"step={step}"
        parts = tuple(str(p) for p in staged_parts(directory, channels))
        if len(parts) != channels:
            raise DeltaReleaseError(f"barrier: step {step} of sink {self.name} has {len(parts)} of {channels} "
                                    f"parts staged")
        assert self.write is not None, "a barrier that releases needs a Spark process to write"
        self.write(StepWrite(self.name, str(self.sink.path), self.app_id, step, parts, self.sink.partition_by,
                             self.sink.merge_schema))
        if self.crash is not None:
            self.crash.after("delta-written")
        if self.gt_last() < step:
            raise DeltaReleaseError(f"sink {self.name}: the write of step {step} did not commit")
        self._drop_staged(step)
        return True

    # -- a fresh run (barrier/existing.py) ------------------------------------------

    def newest(self) -> int:
        """The newest step this pipeline released to the table (an earlier run's output)."""
        return self.gt_last()

    def reset(self) -> None:
        """``overwrite``: the table goes, with its history (the pipeline's steps start again at 1)."""
        if self.sink.path.exists():
            shutil.rmtree(self.sink.path)
