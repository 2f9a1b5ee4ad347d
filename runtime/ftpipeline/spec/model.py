"""Typed, immutable view of a validated FTPipeline.

The loader (``ftpipeline.spec.load``) is the only producer of these objects and
only builds them from documents that passed every check, so code below this
layer never re-validates: a ``PipelineSpec`` in hand is a runnable pipeline.
Paths are already absolute; defaults are already applied.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from pathlib import Path


class StageKind(str, enum.Enum):
    SOURCE = "source"
    TRANSFORM = "transform"
    AGGREGATE = "aggregate"
    DEDUPLICATE = "deduplicate"
    JOIN = "join"
    PROCESS = "process"
    LOOKUP = "lookup"
    SINK = "sink"


class Partition(str, enum.Enum):
    """How an upstream channel's rows are split over the downstream channels."""

    FORWARD = "forward"
    HASH = "hash"
    BROADCAST = "broadcast"

    @property
    def number(self) -> int:
        """The partition-function number that is part of every object name."""
        return {Partition.FORWARD: 0, Partition.HASH: 1, Partition.BROADCAST: 2}[self]


@dataclass(frozen=True)
class Edge:
    upstream: str
    downstream: str
    partition: Partition
    keys: tuple[str, ...] = ()


@dataclass(frozen=True)
class GeneratorSource:
    function: str
    rows_per_step: int
    seed: int = 0


@dataclass(frozen=True)
class FileSource:
    path: Path
    format: str
    rows_per_step: int
    schema: tuple[tuple[str, str], ...] = ()
    follow: bool = False


@dataclass(frozen=True)
class KafkaSource:
    """A Kafka topic: its partitions are the source's slots, partition p read by channel p mod parallelism."""

    topic: str
    format: str = "json"                      # json (a schema's columns) | raw (key, value and the record's coordinates)
    schema: tuple[tuple[str, str], ...] = ()
    starting: str = "earliest"                # earliest | latest | timestamp: where partitions start on a fresh run
    starting_timestamp_ms: int = 0
    ending: str = ""                          # "": never ends; latest: stops at the ends seen when reading began
    max_records_per_step: int = 0             # 0: everything available


@dataclass(frozen=True)
class Aggregation:
    name: str
    op: str
    column: str | None = None


@dataclass(frozen=True)
class EventTime:
    """A source's event time (``eventtime/``); durations in microseconds."""

    column: str
    max_out_of_orderness_us: int = 0
    idle_timeout_us: int = 0          # 0: a channel is never idle
    record_timestamp: bool = False    # Kafka: the column holds each record's timestamp


@dataclass(frozen=True)
class WindowSpec:
    """Event-time windows of an aggregate (``operators/window.py``); durations in microseconds."""

    kind: str                         # tumbling | sliding | session
    time_column: str
    size_us: int = 0                  # tumbling and sliding
    slide_us: int = 0                 # sliding (tumbling: size)
    gap_us: int = 0                   # session
    allowed_lateness_us: int = 0
    emit: str = "append"              # append | update
    late_data: Path | str | None = None  # where late records go: a directory or s3:// (None: counted, dropped)
    late_topic: str | None = None     # or the Kafka topic they go to, exactly once (``barrier/late.py``)


@dataclass(frozen=True)
class DeduplicateOp:
    """Drop records whose keys were seen within ``within`` of event time (``operators/dedup.py``)."""

    keys: tuple[str, ...]
    within_us: int
    time_column: str
    late_data: Path | str | None = None
    late_topic: str | None = None


@dataclass(frozen=True)
class JoinOp:
    """An interval join of two streams (``operators/join.py``): ``left`` and ``right`` are the input stages;
    a pair's right time minus its left time lies within [``lower_us``, ``upper_us``]."""

    kind: str                         # inner | left | right | full
    keys: tuple[str, ...]
    left: str
    right: str
    lower_us: int
    upper_us: int
    left_time: str
    right_time: str
    late_data: Path | str | None = None
    late_topic: str | None = None


@dataclass(frozen=True)
class LookupOp:
    """A stream joined to a table (``dataflow/lookup.py``): a Delta table or a compacted Kafka topic at the
    version each step recorded, or a Parquet directory that must not change while the pipeline reads it."""

    kind: str                         # inner | left
    keys: tuple[str, ...]
    delta: Path | str | None = None
    parquet: Path | str | None = None
    kafka: KafkaSource | None = None  # a compacted topic: each record's value a row, its key the row's identity

    @property
    def path(self) -> Path | str:
        where = self.delta if self.delta is not None else self.parquet
        assert where is not None
        return where


@dataclass(frozen=True)
class ProcessOp:
    """A keyed function the user writes, with state and timers (``operators/process.py``)."""

    class_name: str                   # a class of the entry point
    keys: tuple[str, ...]
    output: tuple[tuple[str, str], ...]  # column -> type (string, long, double, boolean, timestamp)
    rows: str = "arrow"               # what a key's rows are handed as: arrow | pandas
    initial_delta: Path | str | None = None    # initialState: a Delta table (read as of step 1's time)
    initial_parquet: Path | str | None = None  # or a Parquet directory


@dataclass(frozen=True)
class AggregateOp:
    key_by: tuple[str, ...]
    aggregations: tuple[Aggregation, ...]
    ttl_steps: int = 0  # a key not updated in this many steps is forgotten (0: never)
    window: WindowSpec | None = None


@dataclass(frozen=True)
class ParquetSink:
    path: Path | str                          # a directory, or an s3:// URI (``barrier/objects.py``)
    existing: str = "fail"  # what a fresh run does with output already there: fail | overwrite | resume


@dataclass(frozen=True)
class KafkaSink:
    """A Kafka topic written in one transaction per step and sink channel, released with the barrier."""

    topic: str
    key: tuple[str, ...] = ()                 # columns of the record key (none: no key, partitions spread)
    existing: str = "fail"                    # what a fresh run does when this pipeline already wrote steps here


@dataclass(frozen=True)
class DeltaSink:
    """A Delta Lake table: each step one commit, its ``txnVersion`` the step, released with the barrier."""

    path: Path | str                          # a directory, or ``s3://bucket/prefix``
    partition_by: tuple[str, ...] = ()
    merge_schema: bool = False                # schema evolution: off unless asked for
    existing: str = "fail"                    # what a fresh run does when this pipeline already wrote steps here


@dataclass(frozen=True)
class StageSpec:
    name: str
    kind: StageKind
    parallelism: int
    inputs: tuple[Edge, ...] = ()
    generator: GeneratorSource | None = None
    file: FileSource | None = None
    function: str | None = None
    aggregate: AggregateOp | None = None
    sink: ParquetSink | None = None
    chain: tuple[StageSpec, ...] = ()  # stages run in this one's task, in order (``dataflow/chains.py``)
    kafka: KafkaSource | None = None
    kafka_sink: KafkaSink | None = None
    delta_sink: DeltaSink | None = None
    event_time: EventTime | None = None  # a source's
    deduplicate: DeduplicateOp | None = None
    join: JoinOp | None = None
    process: ProcessOp | None = None
    lookup: LookupOp | None = None

    @property
    def keeps_state(self) -> bool:
        """A keyed stateful stage (``operators/``): its inputs hash on its keys, its state is checkpointed."""
        return self.kind in (StageKind.AGGREGATE, StageKind.DEDUPLICATE, StageKind.JOIN, StageKind.PROCESS)

    @property
    def is_sink(self) -> bool:
        return self.sink is not None or self.kafka_sink is not None or self.delta_sink is not None

    @property
    def _late(self) -> WindowSpec | DeduplicateOp | JoinOp | None:
        """What decides which of the stage's records are late: its window, deduplication or join."""
        return self.deduplicate or self.join or (self.aggregate.window if self.aggregate is not None else None)

    @property
    def late_data(self) -> Path | str | None:
        """Where the stage's late records go: a window's or a deduplication's ``lateData`` (None: dropped)."""
        return self._late.late_data if self._late is not None else None

    @property
    def table_topic(self) -> KafkaSource | None:
        """The compacted topic a lookup stage joins as its table (None: no lookup, or another table)."""
        return self.lookup.kafka if self.lookup is not None else None

    @property
    def late_field(self) -> str:
        """Where its ``lateData`` is in its spec (below ``spec.stages[i]``)."""
        if self.join is not None:
            return "join.lateData"
        return "deduplicate.lateData" if self.deduplicate is not None else "aggregate.window.lateData"

    @property
    def late_topic(self) -> str | None:
        """The Kafka topic the stage's late records go to instead (``lateData.topic``; None: not a topic)."""
        return self._late.late_topic if self._late is not None else None

    @property
    def members(self) -> tuple[StageSpec, ...]:
        """This stage and the ones chained after it: what one of its tasks runs."""
        return (self, *self.chain)


@dataclass(frozen=True)
class Trigger:
    records: int = 1
    timer_ms: int = 100
    tick_ms: int = 0


@dataclass(frozen=True)
class PipelineSpec:
    name: str
    image: str | None
    entry_point: str
    workers: int
    stages: tuple[StageSpec, ...]
    base_dir: Path
    fault_tolerance: bool = True
    mode: str = "lockstep"
    window: int = 1
    max_steps: int | None = None
    trigger: Trigger = field(default_factory=Trigger)
    recovery_strategy: str = "lineage"
    chaining: bool = True            # run one-to-one neighbours as one task (``dataflow/chains.py``)
    reuse_plans: bool = True         # build a chain's Spark plan once, run it every step (``dataflow/plans.py``)
    heartbeat_timeout_ms: int = 6000  # ZooKeeper session timeout of each worker (its heartbeat)
    restart_max: int = 5             # replacements allowed within restart_window_s
    restart_window_s: int = 600
    backoff_initial_ms: int = 1000   # delay before a replacement, doubling per loss in the window
    backoff_max_ms: int = 60_000
    backoff_jitter_percent: int = 20
    progress_deadline_s: int = 600
    gc_interval_ms: int = 500
    redis_url: str | None = None
    spark_master: str = ""           # "": local[cores the worker is given] (``spec/cores.py``)
    spark_conf: tuple[tuple[str, str], ...] = ()
    max_in_memory_bytes: int = 64 * 1024 * 1024  # spark.maxInMemoryBytes: larger tasks go through files (``dataflow/spill.py``)
    dead_letter: Path | str | None = None  # a directory, or an s3:// URI
    checkpoint_steps: int = 0
    checkpoint_ms: int = 0
    checkpoint_retain: int = 2
    checkpoint_max_age_s: int = 0  # 0: retention by count only
    checkpoint_path: Path | str | None = None  # a directory, or an s3:// URI (``objectstore/``)
    state_backend: str = "rocksdb"   # ``state/backend.py``
    zookeeper: str | None = None
    kafka_bootstrap: str = ""        # spec.kafka.bootstrapServers ("": ftpipeline run starts a private broker)
    source_text: str = ""
    identity: str = ""  # what the pipeline's shared state is keyed by (store_key); set by whoever runs it
    label: str = ""     # the pipeline as metrics and logs name it (metrics_label)

    @property
    def store_key(self) -> str:
        """The key of every Redis key, znode and checkpoint sub-path of this pipeline: on Kubernetes
        ``<namespace>.<name>.<uid>``, for ``ftpipeline run`` ``<name>.<digest of its run directory>``,
        so two pipelines of one name never share (or clear) each other's state."""
        return self.identity or self.name

    @property
    def metrics_label(self) -> str:
        """The ``pipeline`` label of its metrics: ``<namespace>/<name>`` on Kubernetes, else the name."""
        return self.label or self.name

    @property
    def checkpoints_enabled(self) -> bool:
        return self.checkpoint_steps > 0 or self.checkpoint_ms > 0

    @property
    def unbounded_warning(self) -> str | None:
        """Why a fault-tolerant run without checkpoints grows with its length (None when it does not)."""
        if not self.fault_tolerance or self.checkpoints_enabled:
            return None
        return ("checkpoints are off: a stateful stage keeps every input since step 1 for its rebuild, so "
                "buffers, the lineage tables, the step log and the work of a recovery grow with the length of the run")

    @property
    def needs_zookeeper(self) -> bool:
        """The command log (and heartbeats) live there whenever the run is fault tolerant."""
        return self.fault_tolerance or self.checkpoints_enabled

    @property
    def checkpoint_root(self) -> Path | str:
        return self.checkpoint_path or (self.base_dir / f"{self.name}-checkpoints")

    @property
    def uses_kafka(self) -> bool:
        return any(s.kafka is not None or s.kafka_sink is not None or s.late_topic is not None
                   or s.table_topic is not None for s in self.stages)

    @property
    def reads_kafka(self) -> bool:
        """Does a source read a topic (a stream: its lag is shown, its records are looked for often)?"""
        return any(s.kafka is not None for s in self.stages)

    @property
    def lookups(self) -> tuple[StageSpec, ...]:
        """The stages that join a table: each step records the version of each one's table."""
        return tuple(s for s in self.stages if s.lookup is not None)

    @property
    def processing_time(self) -> bool:
        """Does a stage read the steps' processing time (a keyed function's timers and TTL)?"""
        return any(s.process is not None for s in self.stages)

    @property
    def event_time(self) -> bool:
        """Does any source declare event time (so every step records a watermark)?"""
        return any(s.event_time is not None for s in self.stages)

    @property
    def object_store_fields(self) -> tuple[tuple[str, str], ...]:
        """(field, URI) of each ``s3://`` location the pipeline writes (it needs an object store: ``objectstore/``)."""
        places = [("spec.checkpoint.storage.path", self.checkpoint_path), ("spec.deadLetter.path", self.dead_letter),
                  *((f"spec.stages[{i}].sink.parquet.path", s.sink.path) for i, s in enumerate(self.stages)
                    if s.sink is not None),
                  *((f"spec.stages[{i}].sink.delta.path", s.delta_sink.path) for i, s in enumerate(self.stages)
                    if s.delta_sink is not None),
                  *((f"spec.stages[{i}].{s.late_field}.path", s.late_data) for i, s in enumerate(self.stages)
                    if s.late_data is not None)]
        return tuple((f, str(p)) for f, p in places if p is not None and str(p).startswith("s3://"))

    @property
    def object_store_uris(self) -> tuple[str, ...]:
        return tuple(uri for _, uri in self.object_store_fields)

    def stage(self, name: str) -> StageSpec:
        for stage in self.stages:
            if stage.name == name:
                return stage
        raise KeyError(name)
