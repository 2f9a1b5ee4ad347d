"""Releasing committed steps: the coordinator's side of the output barrier.

A step is decided (committed) once all its tasks are done and its commit is
sent to the command log (``coordinator.py``); it is *released* here, in
order, once that commit is in the log: any one worker is asked to release it
(``release``, idempotent: every sink's barrier drops a step it holds). Then
its metrics, its observer call and the checkpoint manager hear of it.

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
from typing import TYPE_CHECKING, Any

from ftpipeline.coordinator.errors import PipelineFailed

if TYPE_CHECKING:
    from ftpipeline.coordinator.coordinator import Coordinator

log = logging.getLogger("ftpipeline.coordinator")

RELEASE_RETRY_S = 0.5  # a release no worker answered is tried again after this (the losses are handled first)


def release(c: Coordinator, step: int) -> bool:
    """Release ``step`` through any worker (idempotent); False when none answers, or the sink's
    Kafka cluster is out of reach (the run pauses on it as on a control-plane outage, ``outages.py``)."""
    try:
        record = c.store.step(step)  # kept by the releasing worker for the oracle (control/history.py)
        body: dict[str, Any] = {"step": step, **({"record": record.to_json()} if record is not None else {})}
        answer = c.members.call_any("release", body, f"release step {step}")
    except PipelineFailed as exc:  # every worker just died: their losses are found next turn
        log.warning("release deferred: no worker answers", extra={"step": step, "error": str(exc)})
        c._release_error = str(exc)
        return False
    if isinstance(answer, dict) and answer.get("failed"):  # a sink refuses the step: retrying cannot help
        raise PipelineFailed(f"releasing step {step}: {answer['failed']}")
    if isinstance(answer, dict) and answer.get("unavailable"):
        c.control.unavailable(str(answer["unavailable"]), str(answer.get("error", "")))
        c._release_failing_since = 0.0  # an outage is waited out, not a stall
        return False
    c.control.recovered("kafka")
    return True

def release_committed(c: Coordinator) -> None:
    """Release the steps decided so far, in order, once their commits are in the log. When no
    worker answers (all of them died), the rest wait: the losses are found next turn, and the
    rollback that follows re-runs those steps, which commit and are released again."""
    if not c._unreleased or c.clock() < c._release_retry_at:
        return
    c.journal.settle()
    logged = c.clock()
    while c._unreleased:
        step = c._unreleased[0]
        c.phases.mark(step, "logged", logged)
        if step > c.released:
            if not release(c, step):
                now = c.clock()
                c._release_failing_since = c._release_failing_since or now
                if now - c._release_failing_since > c.stall_timeout_s:  # workers answer, but not this
                    raise PipelineFailed(f"releasing step {step} stalled for {c.stall_timeout_s:.0f}s: "
                                         f"{c._release_error}")
                c._release_retry_at = now + RELEASE_RETRY_S
                return
            c.released = step
            c._release_failing_since = 0.0
        c._unreleased.pop(0)
        c.store.commit(step)
        now = c.clock()
        elapsed = now - c._step_started.pop(step, now)
        c._step_seconds.append(elapsed)
        c._commit_at.append(now - c._started_at)
        for record in c.awaiting_commit:
            record.to_commit_seconds = now - record.detected_at
            c.metrics.recovery_to_commit.observe(record.to_commit_seconds)
        c.awaiting_commit = []
        c.metrics.steps.inc()
        c.metrics.committed.set(step)
        c.metrics.step_seconds.observe(elapsed)
        c.observer.on_step_committed(step, c._step_rows.pop(step, 0), elapsed)
        c.phases.mark(step, "released", now)
        c.phases.close(step)
        c.ckpt.released(step)
        c._hand_back()
        if c.sample_every and step % c.sample_every == 0:
            sample_buffers(c, step)

def sample_buffers(c: Coordinator, step: int) -> None:
    """Bytes each worker holds in its object buffer (bounded by GC and checkpoints)."""
    sample: dict[str, Any] = {"step": step}
    for w in list(c.workers):
        try:
            sample[w] = int(c.client(w).call("stats", timeout_s=5)["held_bytes"])
        except Exception:  # a worker dying now is handled as a loss
            continue
    c.buffer_samples.append(sample)

