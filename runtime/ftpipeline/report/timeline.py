"""Everything a run went through, in order, with the time it happened: what the run report draws.

Why: the terminal shows a recovery as one line that scrolls away, and the
summary shows totals. To *look* at a recovery (how long the steps took
around it, when the next step committed, whether a checkpoint or a Redis
outage was nearby) the report needs every event on one clock. The
coordinator already reports each of them through an ``Observer``; a
``Timeline`` is one more observer that keeps them, each stamped with the
seconds since the timeline was created.

Callbacks come from the coordinator's thread (and control-plane outages from
the watchers' threads), while the live page (``serve.py``) reads from its
own: every access holds one lock, and ``snapshot()`` hands out copies only,
as plain JSON values.

Which worker runs which channel is not an event of its own. The timeline
starts from the rule every run starts with (``lineage.placement``:
channel ``i`` on worker ``i mod W``, applied to the workers it is told about)
or from the placement it is given, follows each recovery's new placement,
and, when given a way to read the coordinator's current placement
(``follow_placement``), uses that (it also sees a replacement taking
channels back).
"""

from __future__ import annotations

import datetime
import enum
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from ftpipeline.coordinator.coordinator import Observer
from ftpipeline.coordinator.recovery import RecoveryRecord
from ftpipeline.coordinator.trigger import Reason
from ftpipeline.dataflow.graph import Graph
from ftpipeline.lineage.naming import Channel, WorkerId
from ftpipeline.lineage.placement import initial_placement
from ftpipeline.report.topology import static_graph
from ftpipeline.spec.model import PipelineSpec

__all__ = ["Timeline", "jsonable", "pair_outages", "steps_of"]

SNAPSHOT_VERSION = 1


def jsonable(value: object) -> Any:
    """``value`` as JSON can hold it: enums by value, channels by key, anything unknown as text."""
    if isinstance(value, enum.Enum):
        return jsonable(value.value)
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, Channel):
        return value.key()
    if isinstance(value, Mapping):
        return {str(jsonable(k)): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [jsonable(v) for v in value]
    return str(value)


def steps_of(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per step run, in the order they started: a step replayed after a rollback is run twice.
    A commit belongs to the newest start of that step still open; ``committed`` is None while it runs."""
    steps: list[dict[str, Any]] = []
    open_runs: dict[int, dict[str, Any]] = {}
    for e in events:
        if e["kind"] == "step-started":
            entry = {"step": e["step"], "reason": e["reason"], "rows": e["rows"], "started": e["t"],
                     "committed": None, "seconds": None}
            steps.append(entry)
            open_runs[e["step"]] = entry
        elif e["kind"] == "step-committed":
            run = open_runs.pop(e["step"], None)
            if run is None:  # its start came before this timeline did (a resumed run)
                run = {"step": e["step"], "reason": "", "rows": e["rows"], "started": None}
                steps.append(run)
            run.update(committed=e["t"], seconds=e["seconds"], rows=e["rows"])
    return steps


def pair_outages(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Control-plane outages: from a component's first "unavailable" to its next "available". A repeated
    "unavailable" is the same outage; an "available" with none open is no outage. ``end`` is None while
    the component is still out of reach."""
    outages: list[dict[str, Any]] = []
    open_by: dict[str, dict[str, Any]] = {}
    for e in events:
        if e["kind"] != "control-plane":
            continue
        component = e["component"]
        if not e["available"] and component not in open_by:
            outage = {"component": component, "start": e["t"], "end": None, "down": e["message"], "up": ""}
            open_by[component] = outage
            outages.append(outage)
        elif e["available"] and component in open_by:
            open_by.pop(component).update(end=e["t"], up=e["message"])
    return outages


class Timeline(Observer):
    """Records the coordinator's events for the report; ``snapshot()`` is the whole of it as JSON values."""

    def __init__(self, spec: PipelineSpec | None = None, placement: Mapping[Channel, WorkerId] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._origin = clock()
        self._started_wall = datetime.datetime.now(datetime.timezone.utc)
        self._lock = threading.Lock()
        self._events: list[dict[str, Any]] = []
        self._records: list[tuple[dict[str, Any], RecoveryRecord]] = []  # the record fills in its next commit later
        self._graph = Graph.physical(spec) if spec is not None else None
        self._name = spec.name if spec is not None else ""
        self._initial: dict[Channel, WorkerId] = dict(placement or {})
        self._placement: dict[Channel, WorkerId] = dict(self._initial)
        self._probe: Callable[[], Mapping[Channel, WorkerId]] | None = None
        self._ended: dict[str, Any] | None = None

    # --- recording ---------------------------------------------------------
    def now(self) -> float:
        """Seconds since this timeline was created."""
        return self._clock() - self._origin

    def _add(self, kind: str, **fields: Any) -> dict[str, Any]:
        event = {"t": round(self.now(), 4), "kind": kind, **{k: jsonable(v) for k, v in fields.items()}}
        with self._lock:
            self._events.append(event)
        return event

    def follow_placement(self, probe: Callable[[], Mapping[Channel, WorkerId]]) -> None:
        """Read the current placement through ``probe`` at each snapshot (the coordinator's ``placement``:
        it is replaced, never changed in place, so reading it from another thread is safe)."""
        with self._lock:
            self._probe = probe

    def finish(self, outcome: str, message: str = "") -> None:
        """The run is over (``outcome``: succeeded, failed, interrupted...): the live page stops refreshing."""
        event = self._add("run-ended", outcome=outcome, message=message)
        with self._lock:
            self._ended = {"t": event["t"], "outcome": outcome, "message": message}

    @property
    def ended(self) -> bool:
        with self._lock:
            return self._ended is not None

    def _place_on(self, workers: list[WorkerId]) -> None:
        """A new set of workers: the start rule places the channels on them (``lineage.placement``)."""
        if self._graph is None or not workers:
            return
        placement = initial_placement(self._graph.channels(), sorted(workers))
        with self._lock:
            self._initial, self._placement = dict(placement), dict(placement)

    # --- the Observer callbacks ---------------------------------------------
    def on_workers_starting(self, workers: list[WorkerId]) -> None:
        self._add("workers-starting", workers=workers)
        self._place_on(workers)

    def on_workers_kept(self, workers: list[WorkerId], why_not: str | None) -> None:
        self._add("workers-kept", workers=workers, why_not=why_not)
        if why_not is None:
            self._place_on(workers)

    def on_worker_joined(self, worker: WorkerId, ready: int, total: int) -> None:
        self._add("worker-joined", worker=worker, ready=ready, total=total)

    def on_step_started(self, step: int, reason: Reason, rows: int) -> None:
        self._add("step-started", step=step, reason=reason, rows=rows)

    def on_source_lag(self, records: int) -> None:
        self._add("source-lag", records=records)

    def on_step_committed(self, step: int, rows: int, seconds: float) -> None:
        self._add("step-committed", step=step, rows=rows, seconds=round(seconds, 4))

    def on_worker_lost(self, worker: WorkerId, how: str = "", *args: Any, **details: Any) -> None:
        """``how``: what found the loss; anything else the coordinator may pass one day is kept as it comes."""
        extra: dict[str, Any] = dict(details)
        if args:
            extra["args"] = list(args)
        self._add("worker-lost", worker=worker, how=how, **extra)

    def on_fenced(self, worker: WorkerId, what: str) -> None:
        self._add("worker-fenced", worker=worker, what=what)

    def on_nondeterministic(self, stage: str, task: str, objects: int) -> None:
        self._add("nondeterministic", stage=stage, task=task, objects=objects)

    def on_recovery(self, record: RecoveryRecord) -> None:
        self._recovered("recovery", record, record.describe())

    def on_rollback(self, record: RecoveryRecord) -> None:
        """The run rolled back by itself (Redis came back empty): drawn as a recovery with no worker lost."""
        cut = f"the checkpoint at step {record.boundary}" if record.boundary else "the very beginning"
        self._recovered("rollback", record, f"rolled back to {cut}: every worker reopened it and the steps after "
                                            f"it replay (up to step {record.replay_to})")

    def _recovered(self, kind: str, record: RecoveryRecord, description: str) -> None:
        t = self.now()
        event = self._add(
            kind, worker=record.worker or "", strategy=record.strategy if kind == "recovery" else "rollback",
            epoch=record.epoch, detected=round(max(t - record.seconds, 0.0), 4), seconds=round(record.seconds, 4),
            tasks=len(record.tasks), survivors=len({w for w, _ in record.tasks}), lost_rows=record.lost_rows,
            planned_rows=record.planned_rows, boundary=record.boundary, moves=record.moves,
            rebuilt=list(record.rebuilt), description=description)
        with self._lock:
            self._records.append((event, record))
            if record.placement:
                self._placement = dict(record.placement)
            else:
                self._placement.update(record.moves)

    def on_checkpoint(self, info: dict[str, Any]) -> None:
        self._add("checkpoint", **{k: v for k, v in info.items() if k != "kind" and k != "t"})

    def on_checkpoint_aborted(self, epoch: int, reason: str) -> None:
        self._add("checkpoint-aborted", epoch=epoch, reason=reason)

    def on_control_plane(self, component: str, available: bool, message: str) -> None:
        self._add("control-plane", component=component, available=available, message=message)

    # --- reading -----------------------------------------------------------
    @staticmethod
    def _recoveries(records: list[tuple[dict[str, Any], RecoveryRecord]],
                    events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Recoveries and rollbacks, each with its next commit: as the coordinator measured it once the next
        step committed, else the first commit this timeline saw after it (None: none yet)."""
        commits = [e["t"] for e in events if e["kind"] == "step-committed"]
        out = []
        for event, record in records:
            to_commit = record.to_commit_seconds
            if to_commit is None:
                later = [t for t in commits if t >= event["t"]]
                to_commit = later[0] - event["detected"] if later else None
            entry = dict(event)
            entry["to_commit_seconds"] = round(to_commit, 4) if to_commit is not None else None
            entry["next_commit"] = round(event["detected"] + to_commit, 4) if to_commit is not None else None
            out.append(entry)
        return out

    def snapshot(self) -> dict[str, Any]:
        """The timeline so far as JSON values (copies: the caller may keep or change them)."""
        with self._lock:
            events = [dict(e) for e in self._events]
            records = list(self._records)
            probe, placement, initial = self._probe, dict(self._placement), dict(self._initial)
            ended = dict(self._ended) if self._ended is not None else None
        if probe is not None:
            try:
                placement = dict(probe()) or placement
            except Exception:  # the report must never stop a run: keep what the events said
                pass
        elapsed = ended["t"] if ended is not None else round(self.now(), 4)
        return {
            "version": SNAPSHOT_VERSION,
            "pipeline": self._name,
            "started_at": self._started_wall.isoformat(timespec="seconds"),
            "elapsed": elapsed,
            "ended": ended,
            "graph": static_graph(self._graph, placement, initial) if self._graph is not None else None,
            "steps": steps_of(events),
            "recoveries": self._recoveries(records, events),
            "checkpoints": [e for e in events if e["kind"] in ("checkpoint", "checkpoint-aborted")],
            "outages": pair_outages(events),
            "workers": [e for e in events if e["kind"] in ("workers-starting", "workers-kept", "worker-joined",
                                                           "worker-lost", "worker-fenced")],
            "lag": [{"t": e["t"], "records": e["records"]} for e in events if e["kind"] == "source-lag"],
            "events": events,
        }
