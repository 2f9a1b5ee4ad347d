"""The output barrier for a Delta Lake table: each step is one Delta commit whose transaction is the step.

The Parquet barrier's protocol (``bundles.py``) with Delta doing the atomic
part, on a volume or in a bucket (``s3://``) alike. Delta records, in the
same commit as the rows, an application's transaction version (``txn``:
``appId``, ``version``): that recorded version *is* the sink's ``GT_last``.
The application id is the pipeline's identity (the name Redis and ZooKeeper
know it by) and the sink's name; the version is the step.

    staged   each sink task's part, one Parquet file per channel under
             ``<table>/_ftpipeline_staging/step=S/`` (a re-run replaces it whole; Delta's readers and
             VACUUM leave names that start with ``_`` alone), where every worker reaches it
    release  the releasing worker's sidecar reads the table's snapshot; when its GT_last is S-1 it
             appends every part of S in one commit with transaction version S, *from that snapshot*
             (delta-rs, ``write_deltalake``); then the staged step is dropped
    replay   a step at or below GT_last is not written again

A commit is the put of the log's next entry, ``_delta_log/<version>.json``,
if absent (on a volume, a create that fails when the file exists; in a
bucket, ``If-None-Match: *``: ``storage_options``). Of two writers of one
version, one wins; the other's commit is checked against the winner's, and
one that carries the same application id is refused ("concurrent
transaction"): a zombie that read the snapshot before the step was released
cannot release it again, and one that reads it after sees GT_last = S and
skips. Nothing depends on a lock table or a rename. For step 1 to be
committed from a snapshot too, a missing table is first created empty with
the step's schema (a commit of its own, version 0).

States of one step::

    staged --commit wins--> released (GT_last = S)
    staged --crash before the commit--> staged   (nothing of it is in the table: the next release writes it)
    staged --crash after the commit--> released  (the next release finds GT_last = S and drops the parts)
    staged --another writer's commit of S wins--> released (this writer's is refused: answered as held)
    released --release again (replay)--> released (skipped)

Steps are released in order, so GT_last is S-1 when S comes. Every step is
a commit, empty or not, so GT_last moves with the steps.

Why delta-rs rather than the worker's Spark with delta-spark:
``bench/delta_on_s3.py`` released the same steps both ways,
and delta-rs took 2-3% of delta-spark's time per step (on a volume and in a
bucket), with no JVM round trip, and in a bucket without Hadoop's S3A
connector and the AWS SDK (690 MB of jars) nor its log store, which keeps
two writers apart only within one Spark driver.

Before a commit the step's columns are checked against the table's
(``delta_schema.py``): a column of another type, a new column without
``mergeSchema``, or partition columns that do not match fail the run as the
user's error naming them, and nothing of the step is written (delta-rs
would cast silently); a column the step lacks is written as nulls. An error
of delta-rs after which the step is in the table anyway counts as released;
any other is retried, except a row the table's constraints refuse or a table
feature delta-rs cannot write (a table another engine made). **What a reader must read**: the
table through any Delta reader (Spark with delta-spark, delta-rs, Trino...);
never the Parquet files under it, which include staged steps.
"""

from __future__ import annotations

import logging
import os
import shutil
import ssl
import tempfile
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa

from ftpipeline.barrier.bundles import part_name, write_part_file
from ftpipeline.barrier.delta_schema import StagedParts, StepRefused, layout
from ftpipeline.lineage.naming import store_user
from ftpipeline.objectstore.base import ObjectStore, is_remote, join, open_store
from ftpipeline.objectstore.config import S3Config, storage_options
from ftpipeline.obs.crash import CrashPoint
from ftpipeline.spec.model import DeltaSink, PipelineSpec

log = logging.getLogger("ftpipeline.sidecar")

STAGING = "_ftpipeline_staging"
# what a Spark session needs to read or write Delta tables itself: the SQL extension and catalog, and few
# partitions for reading the table's log. The sink's releases need none of it (delta-rs, in the sidecar); a
# pipeline's own Spark code that reads Delta names the extension in spec.spark.conf, and its Spark processes
# then put the pinned jars on their class path (``worker/session.build_session``, ``embedded/jars.py``)
SPARK_SETTINGS = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    "spark.databricks.delta.snapshotPartitions": "2",
}




_TRUSTED: set[str] = set()


def trust_ca(ca_file: str) -> None:
    """Have delta-rs trust ``ca_file`` (a private endpoint's CA, ``AWS_CA_BUNDLE``). It takes no CA option:
    its client trusts what ``SSL_CERT_FILE`` names. So this process's ``SSL_CERT_FILE`` becomes a bundle of
    the certificates it trusted already and this CA: trust is only ever added, for every client that reads
    the variable."""
    if ca_file in _TRUSTED:
        return
    paths = ssl.get_default_verify_paths()
    current = os.environ.get("SSL_CERT_FILE") or paths.cafile or paths.openssl_cafile
    pems = [Path(p).read_text() for p in (current, ca_file) if p and Path(p).is_file()]
    bundle = Path(tempfile.mkdtemp(prefix="ftpipeline-ca-")) / "bundle.pem"
    bundle.write_text("\n".join(pems))
    os.environ["SSL_CERT_FILE"] = str(bundle)
    _TRUSTED.add(ca_file)


def trust_store_ca() -> None:
    """``trust_ca`` for the environment's ``AWS_CA_BUNDLE``, if any: called by a process's ``main`` before its
    threads start (changing the environment while other threads read it is not safe)."""
    ca_file = S3Config.from_env().ca_file
    if ca_file:
        trust_ca(ca_file)


def wants_delta(conf: Mapping[str, str]) -> bool:
    return SPARK_SETTINGS["spark.sql.extensions"] in conf.get("spark.sql.extensions", "")


class DeltaReleaseError(RuntimeError):
    """A step could not be released to its table; ``user`` when retrying cannot help (a schema the table
    refuses): the run fails with the message."""

    def __init__(self, message: str, user: bool = False) -> None:
        super().__init__(message)
        self.user = user


def _open_table(location: Path | str, options: Mapping[str, str]) -> Any:
    """The table at ``location`` as delta-rs reads it, or None when there is none yet."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        return DeltaTable(str(location), storage_options=dict(options) or None)
    except TableNotFoundError:
        return None


def _transaction(table: Any, app_id: str) -> int:
    return 0 if table is None else int(table.transaction_version(app_id) or 0)


class DeltaBarrier:
    """The barrier of one Delta sink: the executor stages parts, the releasing sidecar commits them."""

    def __init__(self, name: str, sink: DeltaSink, spec: PipelineSpec, crash: CrashPoint | None = None,
                 config: S3Config | None = None) -> None:
        self.name, self.sink = name, sink
        # a bucket's endpoint and keys, resolved once (by default the environment's: objectstore/config.py)
        self.config = (config or S3Config.from_env()) if is_remote(sink.path) else None
        self.crash = crash  # tests: exit between the commit and the release's answer (obs/crash.py)
        self.app_id = f"{store_user(spec.store_key)}-{name}"  # the name Redis and ZooKeeper know the pipeline by
        self.location = sink.path
        self.options: dict[str, str] = {}
        if self.config is not None:
            self.options = storage_options(self.config)
            if self.config.ca_file:
                trust_ca(self.config.ca_file)
        self.staging: ObjectStore = open_store(join(sink.path, STAGING), self.config)
        self._table: Any = None  # the snapshot this process read last (brought up to date before each use)
        self._lock = threading.RLock()  # the sidecar's calls come on threads of their own

    # -- staging (the executor, when a sink task completes) ------------------------

    def stage(self, step: int, channel: int, table: pa.Table) -> None:
        self.stage_batches(step, channel, table.schema, [table])

    def stage_batches(self, step: int, channel: int, schema: pa.Schema, tables: Iterable[pa.Table]) -> None:
        """Stage one channel's part of ``step`` (a re-run replaces it with the same rows)."""
        key = f"step={step}/{part_name(channel)}"
        local = self.staging.local_path(key)
        if local is not None:
            write_part_file(local.parent, channel, schema, tables)
            return
        scratch = Path(tempfile.mkdtemp(prefix="ftpipeline-delta-part-"))
        try:
            write_part_file(scratch, channel, schema, tables)
            self.staging.upload(key, scratch / part_name(channel))
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def _staged_steps(self) -> dict[int, list[str]]:
        steps: dict[int, list[str]] = {}
        for key in self.staging.list():
            head, _, _ = key.partition("/")
            if head.startswith("step=") and head[5:].isdigit():
                steps.setdefault(int(head[5:]), []).append(key)
        return steps

    def _drop_staged(self, up_to: int, staged: dict[int, list[str]] | None = None) -> None:
        """Staged steps at or below ``up_to``: released, or staged again by a replay of a step already
        released (a rollback re-runs the steps after its cut), which no release will take. ``staged``: the
        listing a release already took (one listing a release, not two)."""
        staged = self._staged_steps() if staged is None else staged
        gone = {step: keys for step, keys in staged.items() if step <= up_to}
        for step in gone:  # on a volume, the step's directory too (a long run would leave thousands)
            if (directory := self.staging.local_path(f"step={step}")) is not None:
                shutil.rmtree(directory, ignore_errors=True)
        self.staging.delete([k for keys in gone.values() for k in keys])

    def clear_staging(self) -> None:
        self.staging.delete_prefix()

    # -- the barrier --------------------------------------------------------------

    def _snapshot(self) -> Any:
        if self._table is None:
            self._table = _open_table(self.location, self.options)
        else:
            self._table.update_incremental()
        return self._table

    def gt_last(self) -> int:
        with self._lock:
            return _transaction(self._snapshot(), self.app_id)

    def release(self, step: int, channels: int) -> bool:
        """Release ``step``; False when the table already holds it (idempotent)."""
        with self._lock:
            return self._release(step, channels)

    def _release(self, step: int, channels: int) -> bool:
        table = self._snapshot()
        done = _transaction(table, self.app_id)
        if done >= step:
            self._drop_staged(step)
            return False
        if done != step - 1:
            raise DeltaReleaseError(f"barrier: cannot release step {step} of sink {self.name} before step {done + 1}")
        wanted = [f"step={step}/{part_name(c)}" for c in range(channels)]
        staged = self._staged_steps()
        found = set(staged.get(step, []))
        if missing := [k for k in wanted if k not in found]:
            raise DeltaReleaseError(f"barrier: step {step} of sink {self.name} has {channels - len(missing)} of "
                                    f"{channels} parts staged")
        try:
            with StagedParts(self.staging, wanted) as parts:
                schema = layout(parts.schema, None if table is None else pa.schema(table.schema().to_arrow()),
                                self.sink.partition_by, [] if table is None else table.metadata().partition_columns,
                                self.sink.merge_schema)
                if table is None:  # created first, so that even step 1 is committed from a snapshot (see above)
                    table = self._create(schema)
                    if _transaction(table, self.app_id) >= step:
                        self._drop_staged(step, staged)
                        return False
                won = self._commit(table, step, parts.reader(schema))
        except StepRefused as exc:
            raise DeltaReleaseError(f"sink {self.name}: table {self.location} refuses step {step}: {exc}",
                                    user=True) from None
        if won and self.crash is not None:
            self.crash.after("delta-written")
        if self.gt_last() < step:
            raise DeltaReleaseError(f"sink {self.name}: the write of step {step} did not commit")
        self._drop_staged(step, staged)
        return won

    def _create(self, schema: pa.Schema) -> Any:
        """The table, created empty with the first step's schema (another writer's creation first is fine)."""
        from deltalake import DeltaTable

        try:
            DeltaTable.create(str(self.location), schema, mode="ignore", partition_by=list(self.sink.partition_by) or None,
                              storage_options=self.options or None)
        except Exception as exc:  # noqa: BLE001 - delta-rs raises bare Exceptions too; a table there is what counts
            self._table = None
            if self._snapshot() is None:
                raise DeltaReleaseError(f"sink {self.name}: table {self.location} could not be created: "
                                        f"{_first_line(exc)}") from None
            log.info("delta table created by another writer", extra={"sink": self.name, "error": _first_line(exc)})
        self._table = None
        table = self._snapshot()
        if table is None:
            raise DeltaReleaseError(f"sink {self.name}: table {self.location} could not be created")
        return table

    def _commit(self, table: Any, step: int, reader: pa.RecordBatchReader) -> bool:
        """Append the parts as one commit with transaction version ``step``, from the snapshot ``table``: True,
        or False when another writer's commit of this step won (ours refused: not an error)."""
        from deltalake import CommitProperties, Transaction, write_deltalake
        from deltalake.exceptions import CommitFailedError, SchemaMismatchError

        try:
            write_deltalake(table, reader, mode="append", partition_by=list(self.sink.partition_by) or None,
                            schema_mode="merge" if self.sink.merge_schema else None,
                            commit_properties=CommitProperties(app_transactions=[Transaction(self.app_id, step)]))
            return True
        except Exception as exc:  # noqa: BLE001 - delta-rs raises bare Exceptions too
            concurrent = isinstance(exc, CommitFailedError)
            if self.gt_last() >= step:  # committed all the same: by another writer, or ours before a later error
                return not concurrent
            text = str(exc)
            user = isinstance(exc, SchemaMismatchError) or any(m in text for m in _REFUSALS)
            raise DeltaReleaseError(f"sink {self.name}: {'table ' + str(self.location) + ' refuses ' if user else ''}"
                                    f"step {step}: {_first_line(exc)}", user=user) from None

    # -- a fresh run (barrier/existing.py) ------------------------------------------

    def newest(self) -> int:
        """The newest step this pipeline released to the table (an earlier run's output)."""
        return self.gt_last()

    def reset(self) -> None:
        """``overwrite``: the table goes, with its history (the pipeline's steps start again at 1)."""
        self._table = None
        if is_remote(self.location):
            open_store(self.location, self.config).delete_prefix()
        elif Path(self.location).exists():
            shutil.rmtree(self.location)


# what delta-rs says when the table itself cannot take a step (a retry cannot help): a row breaking a NOT NULL
# column or a CHECK constraint, a table feature it cannot write (a table another engine made)
_REFUSALS = ("Invalid data found", "Unsupported table features", "Invariant violations")


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:400]
