"""The Spark process of a worker: one warm SparkSession executing tasks.

It holds no fault-tolerance logic. It asks its sidecar for the next task
(whose inputs the sidecar has already located or fetched), runs it, writes
the output objects into the shared buffer directory, and reports. Keeping the
session warm across tasks — and across recoveries, when this worker adopts a
lost worker's channels — is what keeps JVM start-up (seconds) off the
recovery path.

A task runs as follows:

- source: read the recorded offset range (generated or from files), send
  malformed records to the dead-letter output;
- transform: its inputs, concatenated into one Arrow table;
- a keyed stateful stage (an aggregate, a window, a deduplication, a join, a
  keyed function): its operator (``operators/``) over the channel's keyed
  state (``states.py``, held by the pipeline's state backend, ``state/``),
  with the step's recorded watermark and processing time; its late records
  to the late-data output;
- a lookup: its rows joined to its table at the version the step recorded
  (``dataflow/lookup.py``);
- rebuild: the state restored from its newest snapshot (or empty), then the
  operator over the kept inputs since, emitting nothing (folded as one step
  where merging is associative, else step by step): the result *is* the
  state at k;
- sink: stage this channel's part of the step behind the barrier;
- then the rest of its chain (``dataflow/chains.py``) as one program run
  by Spark (``dataflow/plans.py``, the plan built once and reused): the
  transforms' functions, then the hash columns of the output edges; a
  chained sink stages the result;

then the output is split per downstream channel (``dataflow.partition``) and
written as Arrow IPC objects. A task whose input is larger than
``spark.maxInMemoryBytes`` never holds its result: Spark writes it, and it
is split a batch at a time (``dataflow/spill.py``). A user exception is reported as a task
failure, in one line (its traceback is in this process's log): it fails the
pipeline, it is never "completed".
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from ftpipeline.barrier import BundleSink, parquet_sink
from ftpipeline.barrier.delta import DeltaBarrier
from ftpipeline.barrier.kafka import STAGE_LIMIT, write_part
from ftpipeline.barrier.late import late_output
from ftpipeline.checkpoint.storage import CheckpointStorage
from ftpipeline.dataflow import spill
from ftpipeline.dataflow.deadletter import default_dead_letter_root, write_dead_letters
from ftpipeline.dataflow.graph import Graph
from ftpipeline.dataflow.lookup import LookupTables, joined
from ftpipeline.dataflow.partition import split, wanted
from ftpipeline.dataflow.plans import Plans
from ftpipeline.dataflow.sources import DeadLetter, SourceReader, make_reader, read_ranges
from ftpipeline.eventtime.columns import span
from ftpipeline.eventtime.order import apart, early_only, has_early, plain, together
from ftpipeline.operators.late import write_late
from ftpipeline.lineage.determinism import rows_digest
from ftpipeline.lineage.naming import Task, TaskKind
from ftpipeline.lineage.stepclock import StepClock
from ftpipeline.objectstore.base import open_store
from ftpipeline.obs.errors import one_line
from ftpipeline.obs.logging import setup_json_logging
from ftpipeline.spec.inputs import input_problems
from ftpipeline.kafka.topics import topic_problems
from ftpipeline.spec.load import entry_problems, load_entry_module, worker_spec
from ftpipeline.spec.model import PipelineSpec, StageKind, StageSpec
from ftpipeline.state.backend import make_backend
from ftpipeline.worker.buffer import ObjectBuffer, read_ipc
from ftpipeline.worker.exits import cannot_run
from ftpipeline.worker.states import ChannelStates
from ftpipeline.worker.session import WORKER_JAVA_OPTIONS, build_session
from ftpipeline.worker import user_errors
from ftpipeline.worker.transport import SidecarClient, Unreachable

log = logging.getLogger("ftpipeline.executor")
Clocks = dict[int, StepClock]  # the clock each step of a task recorded (its watermark, time, tables' versions)
# How long a call to the sidecar may take. The sidecar waits out an outage of Redis or ZooKeeper itself
# (the run pauses), so this process waits as long: a deadline would end a healthy worker during a store's
# failover. A sidecar that is gone breaks the socket, and the call fails at once.
SIDECAR_PATIENCE_S = 3600.0


class UserCodeError(RuntimeError):
    """The pipeline's own code failed or returned the wrong thing; ``stage`` and ``function`` say whose."""

    def __init__(self, message: str, stage: str = "", function: str = "") -> None:
        super().__init__(message)
        self.stage, self.function = stage, function


class Fenced(RuntimeError):
    """This worker no longer belongs to the run (declared dead while it was silent): it must not write."""


class TaskRunner:
    def __init__(self, spark: Any, spec: PipelineSpec, module: Any, buffer: ObjectBuffer,
                 may_write: Callable[[], bool] = lambda: True) -> None:
        self.spark = spark
        self.may_write = may_write  # the fence: a worker the cluster declared dead writes no output
        self.spec = spec
        self.graph = Graph.physical(spec)
        self.module = module
        self.buffer = buffer
        self.plans = Plans(spark, buffer.root / "scan", reuse=spec.reuse_plans)
        self.results = buffer.root / "results"  # large tasks' results, as Spark wrote them (``dataflow/spill.py``)
        shutil.rmtree(self.results, ignore_errors=True)
        self.readers: dict[str, SourceReader] = {s.name: make_reader(s, module, spec.kafka_bootstrap)
                                                   for s in self.graph.sources()}
        self.sinks: dict[str, BundleSink | DeltaBarrier] = {
            s.name: parquet_sink(s.sink.path) for s in self.graph.sinks() if s.sink}
        self.sinks.update({s.name: DeltaBarrier(s.name, s.delta_sink, spec)
                           for s in self.graph.sinks() if s.delta_sink})
        self.dead_letters = open_store(default_dead_letter_root(spec))
        self.late_stores = {s.name: open_store(s.late_data) for s in spec.stages if s.late_data is not None}
        # the keyed states this process holds, and the operators that step them (worker/states.py)
        self.keyed = ChannelStates(spark, spec, self.graph, module, make_backend(spec.state_backend, buffer.root),
                                   CheckpointStorage(spec.checkpoint_root, spec.store_key))
        self.staged: list[list[Any]] = []  # Kafka sink parts this task wrote: [sink, step, channel, file]
        self.lookups = LookupTables(spec.kafka_bootstrap)  # the tables lookup stages join (dataflow/lookup.py)

    def warm(self) -> list[str]:
        """Build the plan of each chain a source with a known schema feeds (a Kafka topic's), before its
        first records arrive: the stages warmed."""
        warmed = []
        for source in self.graph.sources():
            empty = self.readers[source.name].empty()
            functions, _ = _program_of(source)
            if functions and empty.num_columns and self.plans.warm(
                    source.name, _compose([self._function(m) for m in functions]), empty):
                warmed.append(source.name)
        return warmed

    def _inputs(self, inputs: list[list[Any]]) -> tuple[pa.Table | None, int]:
        tables = [read_ipc(Path(path), int(batch)) for _, path, batch in inputs]
        if not tables:
            return None, 0
        table = pa.concat_tables(tables, promote_options="permissive")
        return table, table.num_rows

    def run(self, task: Task, inputs: list[list[Any]], clocks: Clocks | None = None) -> dict[str, Any]:
        return self.run_group([(task, inputs, clocks or {})])[0]

    def run_group(self, items: list[tuple[Task, list[list[Any]], Clocks]]) -> list[dict[str, Any]]:
        """Tasks handed out together (of one stage and step, ``worker/sidecar.py``): each one's own work,
        then their chain's program as one Spark job where it may be (``Plans.run_many``), then each
        one's outputs; one result per task, in order."""
        heads = []
        for task, inputs, clocks in items:
            started = time.perf_counter()
            heads.append(self._head(task, inputs, clocks))
            part = "operator" if task.kind in (TaskKind.AGGREGATE, TaskKind.REBUILD) else (
                "write" if task.kind is TaskKind.SINK else "read")
            heads[-1].parts[part] = time.perf_counter() - started
        started, jobs = time.perf_counter(), self.plans.jobs
        tables = self._chains([h.task for h in heads], [h.table for h in heads])
        shared = {"spark": (time.perf_counter() - started) / len(heads), "jobs": (self.plans.jobs - jobs) / len(heads)}
        results = []
        for head, table in zip(heads, tables):
            started = time.perf_counter()
            results.append(self._finish(head, table))
            head.parts["write"] = head.parts.get("write", 0.0) + time.perf_counter() - started
            results[-1]["parts"] = {k: round(v, 6) for k, v in (head.parts | shared).items()}  # obs/phases.py
        return results

    def _head(self, task: Task, inputs: list[list[Any]], clocks: Clocks) -> _Head:
        """The task's own work before its chain: read, or its operator's step, or its sink's staging."""
        stage = self.graph.stage(task.stage)
        head = _Head(task)
        head.table, head.rows_in = self._inputs(inputs)
        if task.kind is TaskKind.SOURCE:
            assert task.ranges is not None
            batch = read_ranges(self.readers[task.stage], task.step, task.ranges)
            head.table, head.dead, head.rows_in = batch.table, batch.dead_letters, task.source_rows
            if stage.event_time is not None:  # what the watermark is made of (eventtime/)
                head.event_min, head.event_max = span(head.table, stage.event_time.column,
                                                      f"stage {stage.name!r} source.eventTime.column")
        elif task.kind in (TaskKind.AGGREGATE, TaskKind.REBUILD):  # a rebuild returns none: its chain ran
            head.table, head.dead, late = self.keyed.operate(task, inputs, clocks, self._inputs)
            head.late = self._late(task, late)
        elif task.kind is TaskKind.SINK:
            assert head.table is not None
            self._sink(task, stage, head.table)
            head.table = None
        elif stage.lookup is not None:  # joined to its table at the version the step recorded
            assert head.table is not None
            version = clocks.get(task.step, StepClock()).tables.get(stage.name)
            if version is None:
                raise RuntimeError(f"{task.id}: the step recorded no version of {stage.name!r}'s table")
            parts = [joined(stage, t, self.lookups.table(stage, version)) if t.num_rows or i else None
                     for i, t in enumerate(apart(head.table))]
            head.table = together(*parts)
        else:
            assert head.table is not None  # a transform: its function opens the chain's program
        return head

    def _finish(self, head: _Head, table: pa.Table | spill.Written | None) -> dict[str, Any]:
        task = head.task
        if head.dead and task.kind is not TaskKind.REBUILD:
            write_dead_letters(self.dead_letters, task.stage, task.step, task.channel, head.dead)
        outputs: list[list[Any]] = []
        key = f"{task.stage}.{task.channel}.{task.step}.{task.epoch}"
        digests: dict[str, str] = {}  # object -> its rows' digest (lineage/determinism.py)
        if isinstance(table, spill.Written):
            try:
                outputs = self.buffer.put_streamed(key, (split(self.graph, task, t, self.spark) for t in table.batches()))
            finally:
                table.remove()
        elif table is not None:
            if not self.graph.orders_downstream(task.stage):  # no one downstream tells early rows apart
                table = plain(table)
            objects = split(self.graph, task, table, self.spark)
            if self.graph.stage(task.stage).process is not None:  # a user's keyed function: its re-runs are checked
                digests = {name: rows_digest(part) for name, part in objects.items()}
            outputs = self.buffer.put_bundle(key, objects)
        evicted, self.keyed.evicted = self.keyed.evicted, 0
        warnings, self.keyed.warnings = self.keyed.warnings, []
        staged, self.staged = self.staged, []
        return {"task": task.to_json(), "outputs": outputs, "rows_in": head.rows_in, "dead_letters": len(head.dead),
                "evicted": evicted, "staged": staged, "late": head.late, "event_max": head.event_max,
                "event_min": head.event_min, **({"warnings": warnings} if warnings else {}),
                **({"digests": digests} if digests else {})}

    def _chains(self, tasks: list[Task], tables: list[pa.Table | None]) -> list[pa.Table | spill.Written | None]:
        """Each task's chain (``_chain``); tasks of one stage ready together run its program as one job."""
        stage = self.graph.stage(tasks[0].stage)
        functions, sink = _program_of(stage)
        ready = [t for t in tables if t is not None]
        limit = self.spec.max_in_memory_bytes  # 0: every task goes through files
        early = all(early_only(t) for t in ready)  # all the advance's output: one kind, run as one (eventtime/order.py)
        if early:
            ready = [apart(t)[0] for t in ready]
        if (len(tasks) > 1 and functions and len(ready) == len(tables) and limit > 0 and sum(t.nbytes for t in ready) <= limit
                and (early or not any(has_early(t) for t in ready))
                and (sink is not None or all(wanted(self.graph, t) for t in tasks))):
            outs = self.plans.run_many(stage.name, _compose([self._function(m) for m in functions]), ready)
            if outs is not None and early:
                outs = [together(o, None) for o in outs]
            if outs is not None:
                if sink is None:
                    return list(outs)
                for task, out in zip(tasks, outs):
                    self._sink(task, sink, out)
                return [None] * len(tasks)
        return [None if t is None else self._chain(task, stage, t) for task, t in zip(tasks, tables)]

    def _chain(self, task: Task, stage: StageSpec, table: pa.Table) -> pa.Table | spill.Written | None:
        """The rest of the chain after its head's own work, as one program run by Spark
        (``dataflow/plans.py``): the transforms' functions; then the chain's sink, or the output
        for the objects downstream wants (split per channel by ``dataflow/partition.py``).
        A task larger than ``spark.maxInMemoryBytes`` has Spark write it (``dataflow/spill.py``)."""
        functions, sink = _program_of(stage)
        if sink is None and not wanted(self.graph, task):
            return None  # nothing downstream asks for this output (a recovery re-run for other objects)
        program = [self._function(m) for m in functions]
        if program and has_early(table):  # each kind apart, in memory (eventtime/order.py)
            early, after = apart(table)
            ran = self.plans.run(task.stage, _compose(program), early) if early.num_rows else None
            table = together(ran, self.plans.run(task.stage, _compose(program), after)
                             if after.num_rows or ran is None else None)
            program = []
        if program and spill.through_files(table, self.spec.max_in_memory_bytes):
            return self._through_files(task, sink, _compose(program), table)
        if program:
            table = self.plans.run(task.stage, _compose(program), table)
        if sink is not None:
            self._sink(task, sink, table)
            return None
        return table

    def _through_files(self, task: Task, sink: StageSpec | None, program: Callable[[Any], Any],
                       table: pa.Table) -> spill.Written | None:
        directory = self.results / f"{task.stage}.{task.channel}.{task.step}"
        with spill.scaled(self.spark, table.nbytes) as partitions:
            written = self.plans.run(task.stage, program, table, lambda df: spill.write(df, directory))
        log.info("task through files", extra={"task": task.id, "bytes_in": table.nbytes, "partitions": partitions})
        if sink is None:
            return written
        try:
            self._sink(task, sink, written)
        finally:
            written.remove()
        return None

    def _function(self, stage: StageSpec) -> Callable[[Any], Any]:
        """The stage's user function on a DataFrame, its failures named after the stage."""
        assert stage.function is not None
        fn = getattr(self.module, stage.function)

        def call(df: Any) -> Any:
            try:
                out = fn(df)
            except Exception as exc:
                raise UserCodeError(f"stage {stage.name!r}: {stage.function}() raised {type(exc).__name__}: {exc}",
                                    stage.name, stage.function or "") from exc
            if not hasattr(out, "toArrow"):
                raise UserCodeError(f"stage {stage.name!r}: {stage.function}() returned {type(out).__name__}, expected a DataFrame")
            return out
        return call

    def _sink(self, task: Task, stage: StageSpec, table: pa.Table | spill.Written | None) -> None:
        if not self.may_write():
            raise Fenced(f"sink write of {task.id} ({stage.name}) refused: this worker was fenced off")
        if table is None or isinstance(table, pa.Table):  # both kinds as one (eventtime/order.py)
            table = plain(table if table is not None else pa.table({}))
        if stage.kafka_sink is not None:  # its sidecar stages the part in Redis; the release produces it
            self._stage_part(stage.name, task, table, f"sink {stage.name!r}")
        else:  # a Parquet directory's or a Delta table's staging, beside the output
            if isinstance(table, spill.Written):
                self.sinks[stage.name].stage_batches(task.step, task.channel, table.schema, table.batches())
            else:
                self.sinks[stage.name].stage(task.step, task.channel, table)

    def _stage_part(self, output: str, task: Task, table: pa.Table | spill.Written, what: str) -> None:
        """A part of a Kafka output (a sink, or late records) in a file for the sidecar to stage in Redis."""
        name = f"staged/{output}.{task.step}.{task.channel}.arrow"
        path = self.buffer.root / name
        path.parent.mkdir(exist_ok=True)
        tables = table.batches() if isinstance(table, spill.Written) else iter([table])
        write_part(path, tables, table.schema)
        if path.stat().st_size > STAGE_LIMIT:
            raise UserCodeError(f"{what}: step {task.step}'s output of channel {task.channel} is "
                                f"{path.stat().st_size} bytes compressed, more than a step may stage "
                                f"({STAGE_LIMIT}): read fewer records per step (maxRecordsPerStep)")
        self.staged.append([output, task.step, task.channel, name])

    def _late(self, task: Task, late: pa.Table | None) -> int:
        """A keyed operator's late records of a step: to the stage's lateData directory or topic; how many."""
        count = late.num_rows if late is not None else 0
        stage = self.graph.stage(task.stage)
        if count and stage.late_data is not None:
            assert late is not None
            write_late(self.late_stores[stage.name], task.stage, task.step, task.channel, stage.parallelism, late)
        elif count and stage.late_topic is not None:  # staged by the sidecar, produced by the release
            assert late is not None
            self._stage_part(late_output(task.stage), task, late, f"late data of {task.stage!r}")
        return count


@dataclass
class _Head:
    """A task's own work done, before its chain: the rows it passes on, and what it reports."""

    task: Task
    table: pa.Table | None = None
    rows_in: int = 0
    dead: list[DeadLetter] = field(default_factory=list)
    late: int = 0
    event_max: int | None = None
    event_min: int | None = None
    parts: dict[str, float] = field(default_factory=dict)  # seconds per part of its work (obs/phases.py)


def _program_of(stage: StageSpec) -> tuple[list[StageSpec], StageSpec | None]:
    """A chain's transforms (its program's functions, in order) and its sink, if it ends in one."""
    functions = [m for m in (stage, *stage.chain) if m.kind is StageKind.TRANSFORM]
    sink = stage.chain[-1] if stage.chain and stage.chain[-1].kind is StageKind.SINK else None
    return functions, sink


def _compose(program: list[Callable[[Any], Any]]) -> Callable[[Any], Any]:
    def run(df: Any) -> Any:
        for step in program:
            df = step(df)
        return df
    return run


def _snapshot(runner: TaskRunner, snapshots: SidecarClient, epoch: int) -> None:
    """Snapshot every state of this process for checkpoint ``epoch``, reported on the snapshot connection."""

    def report(snaps: list[dict[str, Any]]) -> None:
        snapshots.call("snapshot_done", {"epoch": epoch, "snapshots": snaps})

    def failed(error: str) -> None:
        snapshots.call("snapshot_failed", {"epoch": epoch, "error": error})

    runner.keyed.snapshot(epoch, report, failed)


def _sidecar_address(work_dir: Path, timeout_s: float = 60) -> str:
    path = work_dir / "sidecar.addr"
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"sidecar did not publish {path}")
        time.sleep(0.05)
    return path.read_text().strip()


def serve(worker: str, work_dir: Path, master: str, conf: dict[str, str], sidecar_wait_s: float = 60.0) -> None:
    spark = build_session(master, conf, work_dir, f"ftpipeline-{worker}",
                          os.environ.get("FTPIPELINE_WORKER_JAVA_OPTIONS", WORKER_JAVA_OPTIONS))
    spark.createDataFrame(pa.table({"x": [1]})).toArrow()  # warm up the JVM paths every task uses
    log.info("spark session", extra={"worker": worker, "master": spark.sparkContext.master,
                                     "shuffle_partitions": spark.conf.get("spark.sql.shuffle.partitions")})
    sidecar = SidecarClient(_sidecar_address(work_dir, sidecar_wait_s), timeout_s=SIDECAR_PATIENCE_S)
    config = None
    while config is None:
        config = sidecar.call("hello", {"pid": os.getpid()})
        if config is None:
            time.sleep(0.1)
    spec = worker_spec(config)
    wrong = entry_problems(spec) + input_problems(spec) + topic_problems(spec)
    if wrong:  # the operator sees neither the image nor the volumes: say which field, not a late task error
        cannot_run("invalid pipeline: " + "; ".join(map(str, wrong)), work_dir)
    module = load_entry_module(spec.entry_point, spec.base_dir)
    module_file = getattr(module, "__file__", None)
    code_dir = Path(module_file).parent if module_file else spec.base_dir  # where the user's frames are
    runner = TaskRunner(spark, spec, module, ObjectBuffer(work_dir),
                        may_write=lambda: bool(sidecar.call("may_write", {})["ok"]))
    warmed = runner.warm()  # a stream's plans, before its first records (dataflow/plans.py)
    log.info("ready", extra={"worker": worker, "warmed": warmed})
    snapshots = SidecarClient(_sidecar_address(work_dir), timeout_s=SIDECAR_PATIENCE_S)  # the snapshot thread's own
    # an eviction's SIGTERM is the sidecar's to act on (worker/leaving.py): this process runs on until the
    # sidecar says shutdown or goes
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    while True:
        reply = sidecar.call("next_task", {"timeout_ms": 1000})
        if reply is None:
            continue
        if reply.get("shutdown"):
            break
        if "snapshot" in reply:  # leaving: every state as it is now, for the workers taking it over
            _snapshot(runner, snapshots, int(reply["snapshot"]))
            continue
        if "open" in reply:
            runner.keyed.open(reply["open"]["states"])
            sidecar.call("opened", {})
            log.info("opened", extra={"worker": worker, "boundary": reply["open"]["boundary"]})
            continue
        group = reply.get("group", [reply])  # tasks of one stage and step handed out together
        for item in group:
            if "checkpoint" in item:  # before the first task of a newer epoch (see worker/epochs.py)
                _snapshot(runner, snapshots, int(item["checkpoint"]))
        items = [(Task.from_json(r["task"]), r["inputs"],
                  {int(s): StepClock.from_json(c) for s, c in (r.get("clocks") or {}).items()})  # JSON keys: text
                 for r in group]
        started = time.monotonic()
        try:
            results = runner.run_group(items)
        except Fenced as exc:
            log.error("fenced", extra={"tasks": [t.id for t, *_ in items], "error": str(exc)})
            continue
        except Exception as exc:
            task = items[0][0]
            user = user_errors.describe(exc, runner.graph.stage(task.stage).members, module, code_dir)
            error = str(user) if user is not None else one_line(exc)
            log.exception("task failed", extra={"task": task.id, "error": error})  # the traceback: here
            for failed, *_ in items:
                sidecar.call("task_failed", {"id": failed.id, "error": error,
                                             **({"user": user.to_json()} if user is not None else {})})
            continue
        seconds = round((time.monotonic() - started) / len(items), 4)
        for (task, *_), result in zip(items, results):
            sidecar.call("task_done", result)
            log.info("task done", extra={"task": task.id, "seconds": seconds, "rows_in": result["rows_in"],
                                         "outputs": len(result["outputs"]), "group": len(items)})
    runner.keyed.close()
    runner.lookups.close()
    try:
        spark.stop()
    except Exception as exc:  # the JVM went first (a pod's or a run's end signals the whole process group)
        log.info("spark already stopped", extra={"worker": worker, "error": one_line(exc)})


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="ftpipeline Spark process")
    parser.add_argument("--worker-id", required=True)
    parser.add_argument("--dir", required=True, type=Path, help="buffer directory shared with the sidecar")
    parser.add_argument("--spark-master", default="local[1]")
    parser.add_argument("--spark-conf", default="{}", help="JSON object of extra Spark settings")
    parser.add_argument("--sidecar-wait-s", type=float, default=60.0,
                        help="how long to wait for the sidecar's address once the session is up")
    args = parser.parse_args(argv)
    setup_json_logging()
    try:
        serve(args.worker_id, args.dir, args.spark_master, json.loads(args.spark_conf), args.sidecar_wait_s)
    except Unreachable as exc:  # the sidecar ended (fenced off, or its pod is going): this process goes with it
        log.error("the sidecar is gone: stopping", extra={"worker": args.worker_id, "error": str(exc)})
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
