"""A worker's side of the output barrier: each sink's barrier, and releases.

The coordinator asks any one worker to release a committed step
(``coordinator/release.py``); the sidecar answers with the barriers it
holds (``barrier/``): it renames a Parquet step into place or puts its
commit object, commits a Kafka transaction, or commits a Delta step
(delta-rs, here in the sidecar: the Spark process is not interrupted).

Answers of a release: ``released`` (per sink: whether it wrote the step, or
held it already), ``unavailable`` (a Kafka cluster out of reach: the run
pauses, ``coordinator/outages.py``) or ``failed`` (a step the sink refuses,
such as a Delta schema mismatch: the run fails with the message). A worker
the run let go releases nothing: its write could race the releasing one's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ftpipeline.barrier import Barrier, barrier_of
from ftpipeline.barrier.delta import DeltaBarrier, DeltaReleaseError
from ftpipeline.barrier.existing import prepare_outputs
from ftpipeline.barrier.kafka import KafkaBarrier, KafkaReleaseError
from ftpipeline.barrier.late import LateTopicBarrier, late_output
from ftpipeline.control.history import history_store, remember
from ftpipeline.objectstore.base import ObjectStore
from ftpipeline.control.store import RunStore
from ftpipeline.dataflow.deadletter import default_dead_letter_root
from ftpipeline.dataflow.graph import Graph
from ftpipeline.obs.crash import CrashPoint
from ftpipeline.spec.model import PipelineSpec

log = logging.getLogger("ftpipeline.sidecar")

class Outputs:
    """The sinks' barriers of one worker."""

    def __init__(self, worker: str, store: RunStore, may_release: Callable[[], bool]) -> None:
        self.worker, self.store = worker, store
        self.may_release = may_release  # still a member of the run
        self.spec: PipelineSpec | None = None
        self.graph: Graph | None = None
        self.barriers: dict[str, Barrier] = {}
        self._history_failed = False  # the step history could not be written (``control/history.py``)
        self._history: ObjectStore | None = None  # where it is kept, opened on the first release

    def open(self, spec: PipelineSpec, graph: Graph) -> None:
        """A new run (``create``): barriers for its sinks, the previous run's closed."""
        self.close()
        self.spec, self.graph = spec, graph
        self.barriers = {s.name: barrier_of(s, spec, self.store, self.worker)
                         for s in graph.sinks()}
        crash = CrashPoint.from_env(self.worker)
        self.barriers |= {late_output(s.name): LateTopicBarrier(s, spec, self.store, crash)
                          for s in graph.spec.stages if s.late_topic is not None}

    def close(self) -> None:
        for barrier in self.barriers.values():
            if isinstance(barrier, KafkaBarrier):
                barrier.close()
        self.barriers = {}

    def stage(self, sink: str, step: int, channel: int, path: Path) -> None:
        """A Kafka sink's part, or late records for a topic, the Spark process left in a file (it has no Redis)."""
        barrier = self.barriers[sink]
        assert isinstance(barrier, KafkaBarrier)
        barrier.stage(step, channel, path)

    # --- the coordinator's calls -------------------------------------------------

    def _do_release(self, body: dict[str, Any]) -> dict[str, Any]:
        assert self.graph is not None
        step = int(body["step"])
        if any(isinstance(b, (KafkaBarrier, DeltaBarrier)) for b in self.barriers.values()) and not self.may_release():
            # a transaction of a worker the run let go must not commit: refused here, and fenced by Kafka
            # once the worker releasing instead initialised the same transactional ids
            self.store.add_stats({"fenced_releases": 1})
            raise RuntimeError(f"worker {self.worker} may not release step {step}: not a member of the run")
        released = {}
        try:
            for sink in self.graph.sinks():
                released[sink.name] = self.barriers[sink.name].release(step, sink.parallelism)
            for name, barrier in self.barriers.items():  # late records: one transaction for all channels
                if isinstance(barrier, LateTopicBarrier):
                    released[name] = barrier.release(step, 1)
        except KafkaReleaseError as exc:
            if not exc.unreachable:
                raise
            # not this worker's fault: the coordinator pauses the run on it, and releases again later
            return {"unavailable": "kafka", "error": str(exc)}
        except DeltaReleaseError as exc:
            if not exc.user:
                raise
            log.error("release refused", extra={"step": step, "error": str(exc)})
            return {"failed": str(exc)}
        if body.get("record") and self.spec is not None:
            try:
                self._history = self._history or history_store(self.spec)
                remember(self._history, self.worker, str(body["record"]))
            except OSError as exc:  # only --verify needs it: the step is released all the same
                if not self._history_failed:  # said once, not every step
                    log.warning("step history not kept", extra={"step": step, "path": history_store(self.spec).uri,
                                                                "error": str(exc)})
                self._history_failed = True
        return {"released": released}

    def _do_prepare_outputs(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        """A fresh run: apply each sink's ``existingOutput`` (``barrier/existing.py``); the problems, if any."""
        assert self.spec is not None
        return [vars(p) for p in prepare_outputs(self.spec, default_dead_letter_root(self.spec))]

    def _do_barrier(self, body: dict[str, Any]) -> dict[str, Any]:
        """GT_last of the output: the newest step every sink has released."""
        return {"gt_last": min((b.gt_last() for b in self.barriers.values()), default=0)}
