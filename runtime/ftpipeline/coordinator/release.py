"""Releasing committed steps: the coordinator's side of the output barrier.

A step is decided (committed) once all its tasks are done and its commit is
sent to the command log (``coordinator.py``); it is *released* here, in
order, once that commit is in the log: any one worker is asked to release it
(idempotent: every sink's barrier drops a step it holds). Then the coordinator
hears of it (its metrics, observer and checkpoint manager). :class:`Releases`
owns what this protocol keeps: the steps decided and not yet released, the
newest released step (the barrier's GT_last) and how long releasing has failed.

    committed --commit in the log, a worker releases it--> released
    committed --no worker answers (all just died)--> committed (tried again after RELEASE_RETRY_S;
                 the rollback that follows the losses re-runs and releases it; failed after the
                 stall timeout if workers answer but none can release it)
    committed --a Kafka sink's cluster out of reach--> committed, the run paused on "kafka"
                 (``outages.py``: a log line, a metric, on Kubernetes an Event and the Paused
                 condition) until a release succeeds
    committed --a sink refuses the step (a Delta table, its schema)--> failed, the sink's message
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ftpipeline.control.store import RunStore
from ftpipeline.coordinator.errors import PipelineFailed
from ftpipeline.coordinator.journal import Journal
from ftpipeline.coordinator.members import Members
from ftpipeline.coordinator.outages import ControlPlane
from ftpipeline.obs.phases import StepPhases

log = logging.getLogger("ftpipeline.coordinator")

RELEASE_RETRY_S = 0.5  # a release no worker answered is tried again after this (the losses are handled first)


class Releases:
    def __init__(self, members: Members, store: RunStore, journal: Journal, control: ControlPlane,
                 phases: StepPhases, stall_timeout_s: float, clock: Callable[[], float]) -> None:
        self.members, self.store, self.journal, self.control = members, store, journal, control
        self.phases, self.stall_timeout_s, self.clock = phases, stall_timeout_s, clock
        self.released = 0              # GT_last of the barrier (> committed only right after a rollback)
        self.pending: list[int] = []   # decided, released once their commits are in the log
        self._retry_at = self._failing_since = 0.0
        self._error = ""  # why the last release found no worker able to do it (the stall names it)

    def decided(self, step: int) -> None:
        self.pending.append(step)

    def rewound(self, gt_last: int, boundary: int) -> None:
        """A rollback to ``boundary``: every later step commits again; the sinks hold up to ``gt_last``."""
        self.released = max(gt_last, boundary)
        self.pending = []
        self._failing_since = 0.0

    def release_ready(self, on_released: Callable[[int], None]) -> None:
        """Release the steps decided so far, in order, once their commits are in the log, telling
        ``on_released`` of each. When no worker answers (all of them died), the rest wait: the losses are
        found next turn, and the rollback that follows re-runs those steps, which commit and are released
        again."""
        if not self.pending or self.clock() < self._retry_at:
            return
        self.journal.settle()
        logged = self.clock()
        while self.pending:
            step = self.pending[0]
            self.phases.mark(step, "logged", logged)
            if step > self.released:
                if not self._release(step):
                    now = self.clock()
                    self._failing_since = self._failing_since or now
                    if now - self._failing_since > self.stall_timeout_s:  # workers answer, but not this
                        raise PipelineFailed(f"releasing step {step} stalled for {self.stall_timeout_s:.0f}s: "
                                             f"{self._error}")
                    self._retry_at = now + RELEASE_RETRY_S
                    return
                self.released = step
                self._failing_since = 0.0
            self.pending.pop(0)
            self.store.commit(step)
            on_released(step)

    def _release(self, step: int) -> bool:
        """Release ``step`` through any worker (idempotent); False when none answers, or the sink's
        Kafka cluster is out of reach (the run pauses on it as on a control-plane outage, ``outages.py``)."""
        try:
            record = self.store.step(step)  # kept by the releasing worker for the oracle (control/history.py)
            body: dict[str, Any] = {"step": step, **({"record": record.to_json()} if record is not None else {})}
            answer = self.members.call_any("release", body, f"release step {step}")
        except PipelineFailed as exc:  # every worker just died: their losses are found next turn
            log.warning("release deferred: no worker answers", extra={"step": step, "error": str(exc)})
            self._error = str(exc)
            return False
        if isinstance(answer, dict) and answer.get("failed"):  # a sink refuses the step: retrying cannot help
            raise PipelineFailed(f"releasing step {step}: {answer['failed']}")
        if isinstance(answer, dict) and answer.get("unavailable"):
            self.control.unavailable(str(answer["unavailable"]), str(answer.get("error", "")))
            self._failing_since = 0.0  # an outage is waited out, not a stall
            return False
        self.control.recovered("kafka")
        return True


def sample_buffers(members: Members, step: int) -> dict[str, Any]:
    """Bytes each worker holds in its object buffer (bounded by GC and checkpoints)."""
    sample: dict[str, Any] = {"step": step}
    for w in list(members.workers):
        try:
            sample[w] = int(members.client(w).call("stats", timeout_s=5)["held_bytes"])
        except Exception:  # a worker dying now is handled as a loss
            continue
    return sample
