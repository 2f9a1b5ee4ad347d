"""The coordinator's progress as FTPipeline status and Kubernetes Events.

The coordinator reports through the same ``Observer`` interface the CLI's
progress bar uses; here it becomes the status subresource (phase, steps,
checkpoints, recoveries, workers, conditions) and Events for what people
should see in ``kubectl describe``: a worker lost and how it was recovered,
a checkpoint committed, the pipeline stalled or failed.

Step progress changes many times a second, so status patches are merged
and sent at most once per ``min_interval_s``; phase changes, recoveries and
checkpoints are sent at once.

Conditions follow the usual workload meaning:

    Ready        workers joined and steps commit
    Progressing  a step committed within spec.progressDeadlineSeconds
    Degraded     fewer workers than asked for (recovering, or waiting for a replacement)
    Stalled      no step committed within spec.progressDeadlineSeconds
    Paused       ZooKeeper or Redis is out of reach: the run waits for it (phase Paused), then goes on
    Failed       the run failed and will not be tried again (kubectl wait --for=condition=Failed)

Each phase in which no run goes on (Succeeded, Failed, Suspended, Retrying)
sets every condition again (``ended``): a finished pipeline says it is not
Ready because it ended, with no workers, not what its last running moment said.

Messages are one line naming the cause; tracebacks go to the operator's log.
"""

from __future__ import annotations

import datetime
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from kubernetes.client.exceptions import ApiException

from ftpipeline.coordinator.coordinator import Observer
from ftpipeline.coordinator.recovery import RecoveryRecord
from ftpipeline.coordinator.trigger import Reason
from ftpipeline.lineage.naming import WorkerId
from ftpipeline.obs.errors import one_line

log = logging.getLogger("ftpipeline.operator.status")

Patch = dict[str, Any]
ESSENTIAL = frozenset({"phase", "message", "conditions", "observedGeneration"})  # sent even when the rest is refused
PatchStatus = Callable[[Patch], None]
PostEvent = Callable[[str, str, str], None]   # type (Normal, Warning), reason, message


def now_iso() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def set_condition(conditions: list[dict[str, Any]], kind: str, status: bool, reason: str, message: str,
                  generation: int | None = None) -> list[dict[str, Any]]:
    """Conditions with ``kind`` set; lastTransitionTime moves only when the status changes."""
    value = "True" if status else "False"
    out = [dict(c) for c in conditions if c.get("type") != kind]
    old = next((c for c in conditions if c.get("type") == kind), None)
    since = old["lastTransitionTime"] if old is not None and old.get("status") == value else now_iso()
    cond: dict[str, Any] = {"type": kind, "status": value, "reason": reason, "message": message,
                            "lastTransitionTime": since}
    if generation is not None:
        cond["observedGeneration"] = generation
    out.append(cond)
    return sorted(out, key=lambda c: str(c["type"]))


def api_message(exc: ApiException) -> str:
    """The API server's own one-line message from an error response (not the HTTP dump)."""
    try:
        return one_line(str(json.loads(exc.body or "{}").get("message") or exc.reason))
    except ValueError:
        return one_line(str(exc.reason))


class StatusReporter(Observer):
    def __init__(self, patch_status: PatchStatus, post_event: PostEvent, generation: int | None,
                 conditions: list[dict[str, Any]] | None = None, min_interval_s: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._patch_status = patch_status
        self._post_event = post_event
        self.generation = generation
        self.commits = 0  # steps this reporter's attempt committed (what makes its spec stable)
        self.conditions = list(conditions or [])
        self.min_interval_s = min_interval_s
        self.clock = clock
        self.recoveries = 0
        self.committed_step = 0         # the newest step committed (status.committedStep)
        self.event_time: dict[str, Any] = {}   # status.eventTime: the newest step's watermark and lag
        self.ready = 0                  # workers joined and not lost
        self.total = 0                  # workers the spec asks for
        self.last_commit_at = clock()
        self.stalled = False
        self._pending: Patch = {}
        self._sent_at = 0.0
        self._lock = threading.Lock()
        self.lost_reasons: Mapping[WorkerId, object] = {}   # the cluster backend's diagnoses: why a worker went
        self.on_recovered: Callable[[RecoveryRecord], None] | None = None  # metrics hook of the runner
        self.on_checkpointed: Callable[[Mapping[str, Any]], None] = lambda info: None  # FTPipelineCheckpoints
        self.on_checkpoint_failed: Callable[[str], None] = lambda reason: None

    # --- plumbing ----------------------------------------------------------
    def update(self, urgent: bool = False, **fields: Any) -> None:
        with self._lock:
            self._pending.update(fields)
            if urgent or self.clock() - self._sent_at >= self.min_interval_s:
                self._flush_locked()

    def flush(self) -> None:
        with self._lock:
            self._flush_locked()

    def observe(self, generation: int) -> None:
        """A newer generation the running attempt takes in without stopping (a checkpoint asked for by its
        nonce, a restore refused): ``observedGeneration`` says so at once, as it does for a new attempt."""
        with self._lock:
            if self.generation is not None and generation <= self.generation:
                return
            self.generation = generation
            self._pending["observedGeneration"] = generation
            self._flush_locked()

    def _flush_locked(self) -> None:
        if not self._pending:
            return
        patch, self._pending = self._pending, {}
        patch["observedGeneration"] = self.generation
        patch["conditions"] = self.conditions
        try:
            self._send(patch)
        except ApiException as exc:
            if exc.status != 422:
                self._keep(patch, api_message(exc))
                return
            # A field the CRD's status schema refuses would be carried again forever and hold every later
            # update back with it (a phase stuck at Starting): drop the rest, keep what says where the run is.
            log.error("status patch refused: sending the phase alone", extra={"error": api_message(exc)})
            kept = {k: v for k, v in patch.items() if k in ESSENTIAL}
            try:
                self._send(kept)
            except Exception as again:
                self._keep(kept, api_message(again) if isinstance(again, ApiException) else one_line(again))
        except Exception as exc:
            self._keep(patch, one_line(exc))

    def _send(self, patch: Patch) -> None:
        self._patch_status(patch)
        self._sent_at = self.clock()

    def _keep(self, patch: Patch, error: str) -> None:
        """Status is best effort: a patch that failed is merged into the next one."""
        log.warning("status patch failed", extra={"error": error})
        self._pending = {**patch, **self._pending}

    def condition(self, kind: str, status: bool, reason: str, message: str) -> None:
        self.conditions = set_condition(self.conditions, kind, status, reason, message, self.generation)

    def event(self, kind: str, reason: str, message: str) -> None:
        try:
            self._post_event(kind, reason, message)
        except Exception as exc:
            log.warning("event not posted", extra={"reason": reason, "error": str(exc)})

    # --- the coordinator's reports -------------------------------------------
    def _workers(self) -> dict[str, int]:
        return {"ready": self.ready, "total": self.total}

    def on_workers_starting(self, workers: list[WorkerId]) -> None:
        self.ready, self.total = 0, max(self.total, len(workers))
        self.condition("Ready", False, "WorkersStarting", f"starting {len(workers)} workers")
        if any(c["type"] == "Failed" for c in self.conditions):
            self.condition("Failed", False, "Starting", "the run is being tried again")
        self.update(urgent=True, phase="Starting", workers=self._workers(), message=f"starting {len(workers)} workers")

    def on_workers_kept(self, workers: list[WorkerId], why_not: str | None) -> None:
        if why_not is None:
            self.event("Normal", "TakingOver", f"taking over the {len(workers)} running worker pods")
        else:
            self.event("Normal", "ReplacingPods", f"replacing the {len(workers)} running worker pods: {why_not}")

    def on_worker_joined(self, worker: WorkerId, ready: int, total: int) -> None:
        self.ready = ready
        if self.ready >= self.total:
            self.condition("Degraded", False, "AllWorkersReady", f"{self.ready}/{self.total} workers ready")
        self.update(urgent=self.ready >= self.total, workers=self._workers())

    def on_step_started(self, step: int, reason: Reason, rows: int) -> None:
        self.update(step=step)

    def on_watermark(self, step: int, watermark: int | None, lag_seconds: float | None) -> None:
        from ftpipeline.summary import watermark_text

        self.event_time = {"watermark": watermark_text(watermark) if watermark is not None else ""}
        if lag_seconds is not None:
            self.event_time["lagSeconds"] = round(lag_seconds, 3)

    def on_step_committed(self, step: int, rows: int, seconds: float) -> None:
        self.last_commit_at = self.clock()
        self.commits += 1
        self.committed_step = step
        first = not any(c["type"] == "Ready" and c["status"] == "True" for c in self.conditions)
        urgent = first or self.stalled
        if urgent:
            self.stalled = False
            self.condition("Ready", True, "StepsCommitting", "workers joined and steps commit")
            self.condition("Stalled", False, "StepCommitted", f"step {step} committed")
        self.condition("Progressing", True, "StepCommitted", f"step {step} committed")  # sent with the next patch
        self.update(urgent=urgent, phase="Running", committedStep=step, message="",
                    **({"eventTime": dict(self.event_time)} if self.event_time else {}))

    def on_worker_lost(self, worker: WorkerId, how: str = "") -> None:
        reason = str(self.lost_reasons.get(worker) or how or "lost")
        self.ready = max(0, self.ready - 1)
        self.condition("Degraded", True, "WorkerLost", f"worker {worker}: {reason}")
        self.update(urgent=True, phase="Recovering", message=f"worker {worker} lost ({reason})",
                    workers=self._workers())

    def on_evacuated(self, record: RecoveryRecord) -> None:
        """A drained worker handed its channels over (coordinator/evacuation.py): no recovery is counted."""
        self.ready = max(0, self.ready - 1)
        self.event("Normal", "Evacuated", record.describe())
        self.condition("Degraded", True, "AwaitingReplacement",
                       f"worker {record.worker} was evicted; {self.ready}/{self.total} workers ready until its "
                       f"replacement joins")
        self.update(urgent=True, workers=self._workers(),
                    lastEvacuation={"worker": record.worker, "seconds": round(record.seconds, 4), "time": now_iso()})

    def on_recovery(self, record: RecoveryRecord) -> None:
        self.recoveries += 1
        reason = str(self.lost_reasons.get(WorkerId(record.worker), "lost"))
        self.event("Warning", "WorkerLost", f"worker {record.worker} lost ({reason})")
        self.event("Normal", "Recovered", record.describe())
        self.condition("Degraded", True, "AwaitingReplacement",
                       f"recovered from the loss of worker {record.worker}; {self.ready}/{self.total} workers ready "
                       f"until its replacement joins")
        self.update(urgent=True, phase="Running", recoveries=self.recoveries, workers=self._workers(),
                    lastRecovery={"strategy": record.strategy, "worker": record.worker, "reason": reason,
                                  "seconds": round(record.seconds, 4), "time": now_iso()})
        if self.on_recovered is not None:
            self.on_recovered(record)

    def on_fenced(self, worker: WorkerId, what: str) -> None:
        """A worker the run let go woke up (a healed partition) and was refused: nothing of it counts."""
        self.event("Warning", "WorkerFenced", f"worker {worker} woke up after its recovery and was fenced off: {what}")

    EVENT_TIME_REASONS = {"late-dropped": "LateRecordsDropped", "late-share": "LateRecords",
                          "held-back": "WatermarkHeldBack", "no-input": "SourceChannelEmpty",
                          "went-back": "EventTimeWentBack", "timer-behind": "TimerBehindWatermark"}

    def on_event_time(self, kind: str, about: str, message: str) -> None:
        """Event time going wrong (``eventtime/watch.py``): a Warning Event, and the EventTime condition."""
        reason = self.EVENT_TIME_REASONS.get(kind, "EventTime")
        self.event("Warning", reason, message)
        self.condition("EventTimeDegraded", True, reason, message)
        self.update(urgent=True, conditions=self.conditions)

    def on_nondeterministic(self, stage: str, task: str, objects: int) -> None:
        """A keyed function's re-run emitted other rows than its first run (``lineage/determinism.py``)."""
        message = (f"stage {stage}: task {task}, re-run for recovery, emitted other rows than its first run in "
                   f"{objects} output(s); the function must take time only from ctx and randomness from ctx.rng")
        self.event("Warning", "NondeterministicOutput", message)
        self.condition("Nondeterministic", True, "OutputDiverged", message)

    def on_checkpoint(self, info: Mapping[str, Any]) -> None:
        self.event("Normal", "Checkpointed", f"checkpoint {info['epoch']} committed at step {info['boundary']} in "
                                             f"{info['seconds']:.2f} s ({info['bytes']:,} bytes)")
        if any(c["type"] == "CheckpointFailing" and c["status"] == "True" for c in self.conditions):
            self.condition("CheckpointFailing", False, "Checkpointed", f"checkpoint {info['epoch']} committed")
        self.update(urgent=True, lastCheckpoint={"epoch": info["epoch"], "step": info["boundary"], "time": now_iso(),
                                                 "seconds": info["seconds"]})
        self.on_checkpointed(info)

    def on_checkpoint_aborted(self, epoch: int, reason: str) -> None:
        """A checkpoint that cannot complete (storage unwritable, a worker lost): the run goes on without it."""
        message = f"checkpoint {epoch} aborted: {reason}"
        self.condition("CheckpointFailing", True, "CheckpointAborted", message)
        self.event("Warning", "CheckpointAborted", message)
        self.update(urgent=True, conditions=self.conditions)
        self.on_checkpoint_failed(message)

    def on_control_plane(self, component: str, available: bool, message: str) -> None:
        """ZooKeeper, Redis or a sink's Kafka out of reach pauses the run (``coordinator/outages.py``); back, it
        goes on."""
        name = {"zookeeper": "ZooKeeper", "redis": "Redis", "kafka": "Kafka"}.get(component, component)
        self.condition("Paused", not available, f"{name}{'Available' if available else 'Unavailable'}", message)
        self.event("Normal" if available else "Warning", f"{name}{'Recovered' if available else 'Unavailable'}",
                   message)
        self.update(urgent=True, phase="Running" if available else "Paused", message="" if available else message)

    # --- the runner's verdicts -----------------------------------------------
    def ended(self, phase: str, reason: str, message: str, **fields: Any) -> None:
        """The run stopped (Succeeded, Failed, Suspended, or Retrying after a backoff): every condition says so,
        no worker is counted ready, and the phase is sent at once. ``message`` is one line (the cause of a
        failure)."""
        what = {"Succeeded": "the run succeeded", "Failed": "the run failed", "Suspended": "the run is suspended",
                "Retrying": "the run failed and is tried again after a backoff"}.get(phase, phase)
        self.ready = 0
        self.stalled = False
        self.condition("Ready", False, reason, message or what)
        self.condition("Progressing", False, reason, message or what)
        self.condition("Stalled", False, reason, f"{what}: no step is due")
        self.condition("Degraded", False, "NotRunning", f"{what}: no worker runs")
        if any(c["type"] == "Paused" for c in self.conditions):
            self.condition("Paused", False, "NotRunning", f"{what}: nothing waits for ZooKeeper or Redis")
        self.condition("Failed", phase == "Failed", reason, message or what)
        self.update(urgent=True, phase=phase, message=message if phase in ("Failed", "Retrying") else "",
                    workers=self._workers(), **fields)

    # --- the runner's checks -------------------------------------------------
    def check_progress(self, deadline_s: float) -> None:
        """Stalled once no step committed within the deadline (reported once per stall)."""
        idle = self.clock() - self.last_commit_at
        if idle > deadline_s and not self.stalled:
            self.stalled = True
            message = f"no step committed for {idle:.0f} s (spec.progressDeadlineSeconds: {deadline_s:.0f})"
            self.condition("Stalled", True, "ProgressDeadlineExceeded", message)
            self.condition("Progressing", False, "ProgressDeadlineExceeded", message)
            self.event("Warning", "Stalled", message)
            self.update(urgent=True, message=message)
