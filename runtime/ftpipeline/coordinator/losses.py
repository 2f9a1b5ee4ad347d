"""What the coordinator does when a worker is lost, and when it resumes a run: the recovery protocol.

The plans themselves are pure functions (``lineage/planner.py``,
``recovery.py``); this module applies them to a running coordinator, under
the lineage tables' exclusive lock, with the decision written to the
command log first:

    LOST --not a member (seen twice) / still joining--> (ignored / replacement rescheduled)
    LOST --fault tolerance off--> FAILED
    LOST --no survivor--> a new set of workers, rolled back to the newest checkpoint (admission.start_over)
    LOST --'recovery' command (epoch, strategy)--> PLANNING
    PLANNING --lineage plan--> the lost tasks join the survivors' NTTs; steps in flight go on
    PLANNING --checkpoint, or no lineage plan--> every survivor reopens the newest cut; later steps replay
    (applied) --survivors woken, replacement scheduled--> RUNNING

A resumed run (a restarted coordinator or operator) takes the second path
with no lost worker: every worker reopens the newest checkpoint they all
have, and the steps after it replay with the offsets the log recorded.

So does a run whose Redis restarted empty (its generation marker is gone):
the lineage tables, the step log, the inbox and the members are lost, but
not what they describe. The coordinator writes the marker and the members
back, puts the step log back from the command log, and rolls every worker
back to the newest committed checkpoint (none: the beginning, with the
sinks' GT_last dropping the steps already released) — without exiting:

    RUNNING --generation marker gone--> REBUILDING ('resumed' command, rollback)
            --workers reopened, later steps replay--> RUNNING (control_plane_faults{redis, rebuilt})
            --no worker answers (the outage fenced them all)--> each lost; a new set from the newest
              checkpoint (admission.start_over)

A replacement still joining then has lost its registration (its address,
perhaps its ``joined`` event): it is killed and another is started after the
next commit, not charged to the restart budget (the outage took it). A loss
being planned when the rebuild started a new set is not planned again.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from ftpipeline.checkpoint.rescale import changed_stages, reshape
from ftpipeline.coordinator.errors import NoMemberAnswers, PipelineFailed, RestoreRefused
from ftpipeline.coordinator.recovery import (
    RecoveryRecord,
    choose_strategy,
    lost_of,
    recover_lineage,
    rollback,
    wake,
)
from ftpipeline.lineage.naming import WorkerId
from ftpipeline.lineage.placement import adopt
from ftpipeline.lineage.planner import PlanningError

if TYPE_CHECKING:
    from ftpipeline.coordinator.coordinator import Coordinator

log = logging.getLogger("ftpipeline.coordinator")


def recover(c: Coordinator, dead: WorkerId, reason: str = "", how: str = "") -> None:
    """``dead`` is gone (``reason``: how it was seen, for the journal; ``how``: the same in a sentence, for
    people, by default the backend's evidence): recover on the survivors, or fail the run."""
    detected = c.clock()
    if not c.members.knows(dead):
        return  # already handled: a loss can be seen twice (heartbeat expiry, then the process/pod)
    c.journal.close_ring_around(dead, reason)
    cause = f"worker {dead} lost ({c.cluster.why(dead)})"  # what a spent restart budget names
    if c.members.lost_while_joining(dead, detected, c.committed, cause):
        return
    c.observer.on_worker_lost(dead, how or f"{c.cluster.detects} ({c.cluster.why(dead)})")
    if not c.spec.fault_tolerance:
        raise PipelineFailed(f"worker {dead} was lost and spec.faultTolerance is false: nothing to recover from")
    # a plan made on a Redis that came back empty would place every channel nowhere: rebuild it first
    c.check_generation(now=True)
    if not c.members.knows(dead):  # the rebuild found no member answering and started a new set: handled
        return
    survivors = [w for w in c.workers if w != dead]
    if not survivors:
        from ftpipeline.coordinator.admission import start_over  # admission builds on this module

        start_over(c, dead, reason or "lost", cause)
        return
    c.ckpt.abort(f"worker {dead} lost")
    epoch = c.journal.next_epoch()
    manifest = c.ckpt.last
    clients = c.clients_for(survivors)
    c.tables.lock_exclusive(c.owner)
    strategy = "unknown"
    try:
        view = c.tables.snapshot([*survivors, dead])
        strategy = choose_strategy(c.spec.recovery_strategy, c.graph, view, dead, manifest)
        c.journal.append("recovery", epoch=epoch, lost=dead, strategy=strategy,  # write-ahead
                     boundary=(manifest or {}).get("boundary", 0) if strategy == "checkpoint" else None)
        record = None
        if strategy == "lineage":
            try:
                record = recover_lineage(c.graph, c.tables, view, dead, survivors, epoch, manifest,
                                         clients, detected, c.clock, c.ckpt.uncommitted)
            except PlanningError as exc:  # the tables allow no lineage plan: roll back instead
                log.warning("lineage plan impossible; rolling back to the newest checkpoint",
                            extra={"worker": dead, "error": str(exc)})
        if record is not None:
            c.outstanding = {i: t for i, t in c.outstanding.items() if i not in record.replaced}
            c.outstanding.update({t.id: t for _, t in record.tasks})
        else:
            if strategy != "checkpoint":  # the lineage plan was impossible: the log says so first
                c.journal.append("recovery", epoch=epoch, lost=dead, strategy="checkpoint",
                             boundary=(manifest or {}).get("boundary", 0))
            placement, moves = adopt(c.placement, dead, survivors, c.graph.is_stateful)
            record = rollback(c.graph, c.tables, c.store, view, dead, placement, moves, survivors,
                              epoch, manifest, c.releases.released, clients, detected, c.clock,
                              answer_timeout_s=c.members.nudge_timeout_s)
            record.replay_to = c.triggered
            c.rewind(record, manifest, c.releases.released)
    except Exception:
        c.metrics.recoveries.labels(c.spec.metrics_label, strategy, "failed").inc()
        raise
    finally:
        c.tables.unlock_exclusive(c.owner)
    wake(clients)
    record.seconds = c.clock() - detected
    record.lost_rows = lost_of(c.graph, view, dead, manifest)  # a measure: once the lock is released
    c.placement = dict(record.placement)
    c.members.remove(dead)
    record_applied(c, record)
    c.members.schedule_replacement(detected, c.committed, cause)
    c.last_progress = c.clock()
    log.info("recovered", extra=record.summary())


def record_applied(c: Coordinator, record: RecoveryRecord) -> None:
    """A recovery is applied: into the run's record, the store, the metrics and the observer."""
    c.awaiting_commit.append(record)
    c.recoveries.append(record)
    c.store.record_recovery(record.summary())
    c.metrics.recoveries.labels(c.spec.metrics_label, record.strategy, "applied").inc()
    c.metrics.recovery_seconds.labels(c.spec.metrics_label, record.strategy).observe(record.seconds)
    c.metrics.workers_ready.set(len(c.workers))
    c.observer.on_recovery(record)


def resume_at_newest_checkpoint(c: Coordinator, reset: bool = False) -> None:
    """Feldera's start-up: open the largest checkpoint step every worker has (or start fresh). ``reset``:
    the workers were taken over as they ran, so without a checkpoint they reopen the very beginning."""
    stored = [set(c.client(w).call("checkpoints")) for w in c.workers]
    common = set.intersection(*stored)
    newer = {e for e in set.union(*stored) if c.resume_epoch is not None and e > c.resume_epoch}
    c.ckpt.found_in_storage(set.union(*stored))
    if c.resume_epoch is not None:
        if c.resume_epoch not in common:  # before anything is touched: the newest one can still be resumed
            raise RestoreRefused(f"checkpoint {c.resume_epoch} is not available to every worker "
                                 f"(common: {sorted(common) or 'none'})")
        common = {c.resume_epoch}
    if not common:
        log.info("no common checkpoint: starting from the beginning")
        if reset:  # their state, buffers and steps are the earlier run's: back to nothing, as a rollback does
            reopen_everywhere(c, None, c.clock())
        else:
            c.journal.append("resumed", epoch=c.journal.next_epoch(), boundary=0)
        return
    manifest = c.client(c.workers[0]).call("checkpoint_manifest", {"epoch": max(common)})
    if manifest is None:
        raise PipelineFailed(f"checkpoint {max(common)} has no manifest in storage")
    if newer:
        _check_replayable(c, manifest)
    # a stateful stage whose parallelism changed is re-partitioned as it reopens (checkpoint/rescale.py);
    # what cannot be is a SpecError naming the field, before anything is touched
    as_stored, manifest = manifest, reshape(manifest, c.spec)
    for stage in changed_stages(as_stored, c.spec):
        log.info("re-partitioning a stage's state by key", extra={"stage": stage, "epoch": manifest["epoch"],
                                                                  "parallelism": c.spec.stage(stage).parallelism})
    # the resume point is what the workers have, which the log may not know yet (killed between
    # the checkpoint's commit and its command): the log says where this run really restarts
    reopen_everywhere(c, manifest, c.clock())
    c.tally.restore(manifest)  # the counts up to its boundary; the steps after it are counted as they replay
    c.ckpt.last = manifest
    if newer and c.ckpt.discard_newer:  # a restore (the operator's): what came after it is not resumed again
        c.ckpt.discard(newer)
    log.info("resumed", extra={"epoch": manifest["epoch"], "boundary": manifest["boundary"],
                              "gt_last": c.releases.released})


def _check_replayable(c: Coordinator, manifest: dict[str, Any]) -> None:
    """An older checkpoint is restored by replaying the steps after it. A Kafka source reads them again
    only with the offsets the step log recorded (planned afresh, a step could hold other records than
    the one its sink released); the step log keeps them back to the newest ``retain`` checkpoints."""
    boundary, committed = int(manifest["boundary"]), c.store.committed()
    trimmed = committed > boundary and c.store.step(boundary + 1) is None  # trimming takes the oldest steps
    if trimmed and any(s.kafka is not None for s in c.spec.stages):
        raise RestoreRefused(f"checkpoint {manifest['epoch']} (step {boundary}) cannot be restored exactly: "
                             f"the step log no longer holds step {boundary + 1} and later ones, which a Kafka "
                             f"source cannot plan again alike; restore one of the newest "
                             f"spec.checkpoint.retain checkpoints")


def rebuild_lost_store(c: Coordinator) -> None:
    """Redis came back without this run's state: rebuild it and roll back to the newest checkpoint."""
    detected = c.clock()
    manifest = c.ckpt.last
    boundary = int(manifest["boundary"]) if manifest else 0
    log.error("Redis lost the run's state (it restarted empty): rolling back to the newest checkpoint",
              extra={"boundary": boundary, "committed": c.committed})
    c.control.unavailable("redis", "Redis restarted without the run's state (no persistence)")
    c.ckpt.abort("Redis lost the run's state")
    assert c.generation is not None
    c.store.mark_generation(c.generation)
    c.tables.begin_run(c.run_token)
    for worker in c.workers:
        c.store.register(worker, {"address": c.client(worker).address})
        c.tables.admit(worker)
    for joining in list(c.members.joining):
        restart_joining(c, joining, "Redis lost its registration while it was joining", charged=False)
    c.tables.set_placement(c.placement)
    c.journal.restore_step_log()
    try:
        record = reopen_everywhere(c, manifest, detected)
    except NoMemberAnswers as exc:
        _start_over_unanswered(c, str(exc))
    else:
        c.rollbacks.append(record)
        c.observer.on_rollback(record)
    c.store.commit(c.committed)
    c.last_progress = c.clock()
    c.control.recovered("redis", outcome="rebuilt",
                        note=f"rolled back to the checkpoint at step {boundary}" if manifest
                        else "no checkpoint: replaying from step 1 (released steps are dropped)")


def _start_over_unanswered(c: Coordinator, why: str) -> None:
    """No member answers the rollback that rebuilds Redis: the outage that emptied it also took them
    (fenced when their ZooKeeper sessions expired, killed). Their process exits may not have arrived
    yet; as for the last worker lost, a new set starts from the newest checkpoint."""
    gone = list(c.workers)
    log.error("no worker answers after Redis lost the run's state: each is lost",
              extra={"workers": gone, "error": why})
    for worker in gone:  # fenced or dying: made sure of, as a heartbeat loss is
        c.cluster.declare_lost(worker, "it did not answer after Redis lost the run's state")
        c.cluster.kill_worker(worker)
    from ftpipeline.coordinator.admission import start_over  # admission builds on this module

    start_over(c, gone[0] if gone else WorkerId("none"), "no answer after Redis lost the run's state",
               f"every worker lost while Redis restarted empty ({why})")


def restart_joining(c: Coordinator, worker: WorkerId, why: str, charged: bool = True) -> None:
    """A replacement that cannot be admitted: kill it and let another start. ``charged``: it failed on its
    own (counted lost while joining, another after the backoff); not charged: Redis lost its registration
    (another after the next commit, the restart budget untouched)."""
    log.warning("replacement started again", extra={"worker": worker, "reason": why})
    c.cluster.declare_lost(worker, why)
    c.cluster.kill_worker(worker)
    if charged:
        recover(c, worker, why)
        return
    c.journal.close_ring_around(worker, why)
    c.members.requeue(worker, c.clock(), c.committed)


def reopen_everywhere(c: Coordinator, manifest: dict[str, Any] | None, started: float) -> RecoveryRecord:
    """Every worker reopens ``manifest`` (None: the beginning) after a 'resumed' command says so, and the
    steps after it replay; the sinks' GT_last (``c.releases.released``) drops what they already released."""
    epoch = c.journal.next_epoch()
    c.journal.append("resumed", epoch=epoch, boundary=int(manifest["boundary"]) if manifest else 0)  # write-ahead
    gt_last = int(c.members.call_any("barrier", {}, "read the sinks' newest released step")["gt_last"])
    record = rollback(c.graph, c.tables, c.store, c.tables.snapshot(c.workers), None, c.placement, {}, c.workers,
                      epoch, manifest, gt_last, c.clients_for(c.workers), started, c.clock,
                      answer_timeout_s=c.members.nudge_timeout_s)
    record.replay_to = c.triggered
    c.rewind(record, manifest, gt_last)
    return record
