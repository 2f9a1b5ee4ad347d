"""Prometheus metrics of a run, named ``ftpipeline_<subsystem>_<name>_<unit>``.

Labels are bounded (pipeline, strategy, outcome, reason): never a step
number or a row id. Buckets sit around the targets: a step of ~1 s, a
recovery that should commit its next step within ~1 s of a loss.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


RECOVERY_STRATEGIES = ("lineage", "checkpoint", "restart")
RECOVERY_OUTCOMES = ("applied", "failed")
CHECKPOINT_OUTCOMES = ("committed", "aborted", "commit_failed")


class _Families:
    """The run metrics' families: one set per registry, shared by every pipeline it serves."""

    def __init__(self, registry: CollectorRegistry) -> None:
        labels = ["pipeline"]
        self.steps = Counter("ftpipeline_steps_committed_total", "Steps committed (released by the barrier).",
                             labels, registry=registry)
        self.triggers = Counter("ftpipeline_step_triggers_total", "Steps started, by trigger reason.",
                                ["pipeline", "reason"], registry=registry)
        self.committed = Gauge("ftpipeline_step_committed", "Last committed step.", labels,
                               registry=registry)
        self.current = Gauge("ftpipeline_step_current", "Step being run.", labels, registry=registry)
        self.step_seconds = Histogram("ftpipeline_step_duration_seconds", "From trigger to commit of a step.", labels,
                                      buckets=(0.1, 0.25, 0.5, 1, 2, 4, 8, 16, 32), registry=registry)
        self.recoveries = Counter("ftpipeline_recoveries_total", "Worker losses recovered, by strategy and outcome.",
                                  ["pipeline", "strategy", "outcome"], registry=registry)
        self.recovery_seconds = Histogram(
            "ftpipeline_recovery_duration_seconds", "From a worker loss to the plan applied and survivors woken.",
            ["pipeline", "strategy"], buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5), registry=registry)
        self.recovery_to_commit = Histogram(
            "ftpipeline_recovery_to_commit_seconds", "From a worker loss to the next committed step.",
            labels, buckets=(0.25, 0.5, 1, 1.5, 2, 3, 5, 10, 30), registry=registry)
        self.recovery_start = Histogram(
            "ftpipeline_recovery_start_seconds", "From the event that reported a lost worker (a pod deletion) to "
            "the recovery plan applied.", labels, buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5),
            registry=registry)
        self.evacuations = Counter("ftpipeline_evacuations_total", "Workers that left by plan (a drain's eviction) "
                                   "and handed their channels over: no recovery, nothing re-run.", labels,
                                   registry=registry)
        self.replayed = Counter("ftpipeline_recovery_records_replayed_total",
                                "Records read again by tasks re-run for recovery.", labels,
                                registry=registry)
        self.source_rows = Counter("ftpipeline_source_records_total", "Records read by sources.", labels,
                                   registry=registry)
        self.dead_letters = Counter("ftpipeline_dead_letter_records_total",
                                    "Malformed records sent to the dead-letter output.", labels,
                                    registry=registry)
        self.late_records = Counter("ftpipeline_late_records_total",
                                    "Records behind the watermark that a window or a deduplication did not take "
                                    "(sent to its late-data output), each counted once.", labels, registry=registry)
        self.nondeterministic = Counter("ftpipeline_nondeterministic_outputs_total",
                                        "Output objects a re-run of a keyed function emitted with other rows than "
                                        "its first run (lineage/determinism.py), by stage.", [*labels, "stage"],
                                        registry=registry)
        self.watermark = Gauge("ftpipeline_watermark_seconds", "Event time (seconds since the epoch) of the newest "
                               "step's watermark.", labels, registry=registry)
        self.held_back = Gauge("ftpipeline_watermark_held_back_seconds", "How far behind the newest source channel "
                               "the channel holding the pipeline's watermark back is, while it holds it far behind "
                               "(eventtime/watch.py); 0 once it no longer does.", [*labels, "channel"],
                               registry=registry)
        self.event_time_lag = Gauge("ftpipeline_event_time_lag_seconds", "How far the watermark is behind the newest "
                                    "event time the sources read.", labels, registry=registry)
        self.checkpoints = Counter("ftpipeline_checkpoints_total", "Checkpoints, by outcome (committed, aborted, commit_failed).",
                                   ["pipeline", "outcome"], registry=registry)
        self.checkpoint_seconds = Histogram(
            "ftpipeline_checkpoint_duration_seconds", "From the start of a checkpoint epoch to its commit in ZooKeeper.",
            labels, buckets=(0.1, 0.25, 0.5, 1, 2, 4, 8, 16, 32), registry=registry)
        self.checkpoint_bytes = Gauge("ftpipeline_checkpoint_size_bytes", "Size of the newest committed checkpoint.",
                                      labels, registry=registry)
        self.checkpoint_age = Gauge("ftpipeline_checkpoint_age_seconds", "Time since the newest checkpoint was committed.",
                                    labels, registry=registry)
        self.checkpoint_step = Gauge("ftpipeline_checkpoint_step", "Boundary step of the newest committed checkpoint.",
                                     labels, registry=registry)
        self.inflight = Counter("ftpipeline_checkpoint_inflight_messages_total",
                                "Messages that crossed a checkpoint's cut and were saved with it.", labels,
                                registry=registry)
        self.workers_ready = Gauge("ftpipeline_workers_ready", "Workers joined and alive.", labels,
                                   registry=registry)
        self.stalled = Gauge("ftpipeline_pipeline_stalled", "1 while no step committed within "
                             "spec.progressDeadlineSeconds (operator).", labels, registry=registry)
        self.control_plane_faults = Counter(
            "ftpipeline_control_plane_faults_total", "Faults of the components a run depends on (zookeeper, redis), "
            "by outcome: paused (the run waits for it), resumed (it answered again), rebuilt (Redis came back empty "
            "and the run rolled back to a checkpoint), worker_rejoined (a heartbeat expired while the worker lived).",
            ["pipeline", "component", "outcome"], registry=registry)
        self.heartbeat_losses = Counter(
            "ftpipeline_heartbeat_expirations_total", "Workers declared dead in the command log because their "
            "ZooKeeper heartbeat expired (hung, stopped or cut off while their process or pod still existed).",
            labels, registry=registry)
        self.log_commands = Counter("ftpipeline_command_log_appends_total",
                                    "Commands the coordinator appended to the command log, by kind.",
                                    ["pipeline", "kind"], registry=registry)
        self.log_znodes = Gauge("ftpipeline_command_log_znodes", "Commands in the log before its last compaction.",
                                labels, registry=registry)
        self.source_lag = Gauge(
            "ftpipeline_source_lag_records", "Records (offsets) a source's workers reported readable that no step has "
            "read yet, per partition of a Kafka topic (per channel of a directory of files): the consumer lag.",
            ["pipeline", "source", "partition"], registry=registry)



_FAMILIES: weakref.WeakKeyDictionary[CollectorRegistry, _Families] = weakref.WeakKeyDictionary()
_FAMILIES_LOCK = threading.Lock()


class RunMetrics:
    """One pipeline's view of the run metrics. The operator serves many pipelines from one registry;
    ``ftpipeline run`` and tests get a fresh registry each."""

    def __init__(self, pipeline: str, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        with _FAMILIES_LOCK:
            f = _FAMILIES.get(self.registry)
            if f is None:
                f = _FAMILIES[self.registry] = _Families(self.registry)
        self.steps = f.steps.labels(pipeline)
        self.triggers = f.triggers
        self.committed = f.committed.labels(pipeline)
        self.current = f.current.labels(pipeline)
        self.step_seconds = f.step_seconds.labels(pipeline)
        self.recoveries = f.recoveries
        self.recovery_seconds = f.recovery_seconds
        self.recovery_to_commit = f.recovery_to_commit.labels(pipeline)
        self.recovery_start = f.recovery_start.labels(pipeline)
        self.evacuations = f.evacuations.labels(pipeline)
        self.replayed = f.replayed.labels(pipeline)
        self.source_rows = f.source_rows.labels(pipeline)
        self.dead_letters = f.dead_letters.labels(pipeline)
        self.late_records = f.late_records.labels(pipeline)
        self.watermark = f.watermark.labels(pipeline)
        self.event_time_lag = f.event_time_lag.labels(pipeline)
        self._held_back = f.held_back
        self.checkpoints = f.checkpoints
        self.checkpoint_seconds = f.checkpoint_seconds.labels(pipeline)
        self.checkpoint_bytes = f.checkpoint_bytes.labels(pipeline)
        self.checkpoint_age = f.checkpoint_age.labels(pipeline)
        self.checkpoint_step = f.checkpoint_step.labels(pipeline)
        self.inflight = f.inflight.labels(pipeline)
        self.workers_ready = f.workers_ready.labels(pipeline)
        self.stalled = f.stalled.labels(pipeline)
        self.heartbeat_losses = f.heartbeat_losses.labels(pipeline)
        self.control_plane_faults = f.control_plane_faults
        self.log_commands = f.log_commands
        self.log_znodes = f.log_znodes.labels(pipeline)
        self._source_lag = f.source_lag
        self._nondeterministic = f.nondeterministic
        self._pipeline = pipeline
        # Every labelled series a dashboard panel rates exists at zero from the start: a series born at its
        # first event has no earlier sample, so rate() and increase() never see that event (a recovery's
        # duration panel stayed empty after the first recovery of each strategy).
        for strategy in RECOVERY_STRATEGIES:
            f.recovery_seconds.labels(pipeline, strategy)
            for outcome in RECOVERY_OUTCOMES:
                f.recoveries.labels(pipeline, strategy, outcome)
        for outcome in CHECKPOINT_OUTCOMES:
            f.checkpoints.labels(pipeline, outcome)

    def diverged(self, stage: str, objects: int) -> None:
        self._nondeterministic.labels(self._pipeline, stage).inc(objects)

    def lag(self, source: str, partition: int, records: int) -> None:
        self._source_lag.labels(self._pipeline, source, str(partition)).set(records)

    def held_back(self, channel: str, seconds: float) -> None:
        self._held_back.labels(self._pipeline, channel).set(seconds)


class WorkerMetrics:
    """A worker sidecar's own ``/metrics``: its buffer and the tasks it ran (labels pipeline, worker)."""

    def __init__(self, pipeline: str, worker: str, held_bytes: Callable[[], float], held_objects: Callable[[], float],
                 registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        labels = ["pipeline", "worker"]
        Gauge("ftpipeline_worker_buffer_bytes", "Bytes of objects this worker holds (buffered outputs).", labels,
              registry=self.registry).labels(pipeline, worker).set_function(held_bytes)
        Gauge("ftpipeline_worker_buffer_objects", "Objects this worker holds.", labels,
              registry=self.registry).labels(pipeline, worker).set_function(held_objects)
        self.tasks = Counter("ftpipeline_worker_tasks_total", "Tasks this worker completed, by whether they re-ran "
                             "lost work (recovery).", [*labels, "recovery"], registry=self.registry)
        self.records = Counter("ftpipeline_worker_records_total", "Records read by this worker's tasks.", labels,
                               registry=self.registry).labels(pipeline, worker)
        self.evicted = Counter("ftpipeline_state_evicted_keys_total", "Keys this worker's stateful channels "
                               "forgot because their TTL passed.", labels, registry=self.registry).labels(pipeline, worker)
        self._labels = (pipeline, worker)

    def task_done(self, rows_in: int, recovery: bool, evicted: int = 0) -> None:
        self.tasks.labels(*self._labels, "true" if recovery else "false").inc()
        self.records.inc(rows_in)
        self.evicted.inc(evicted)

    def serve(self, port: int, addr: str = "0.0.0.0") -> None:
        from prometheus_client import start_http_server

        start_http_server(port, addr, registry=self.registry)
