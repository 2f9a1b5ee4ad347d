"""Admission: how a worker becomes a member of *this* run, and how one of another run is kept out.

A worker process (or pod) is started for one run. Its id (``w2``) is not
enough to fence it: a resumed or restarted run starts workers with the same
ids, and a zombie of the earlier run — stopped, or cut off, while a task was
running — may wake up and commit as ``w2``. So each run's coordinator draws a
*run token* (``r<run epoch>-<random>``), writes it to the lineage tables
before it admits anyone, and hands it to every worker it admits (``adopt``).
A worker presents its token with every completion and before every sink
write; the tables refuse any other token (``lineage/lua/complete_task.lua``),
as they refuse a worker that left ``alive`` when it was declared dead::

    (run start)  --initial workers joined--> each given the token (adopt), then all admitted with
                 the token written (alive, one transaction); created (or the run resumed at a checkpoint)
    (run resumed, workers of an earlier coordinator still up) --every one answers, created alike, as
                 many as the spec asks--> kept in the ring by 'run-started', admitted as a new set
                 is; they reopen the newest checkpoint as a rollback does (no new JVM, no
                 new pod: an operator's handover costs a rollback, not a restart)
    (run resumed, workers still up that cannot be kept) --killed--> a new set, numbered after them
    (a kept worker stops answering while being admitted) --all kept ones killed--> a new set
    (replacement) --'joined', its address registered--> admitted: alive, created, adopt(token)
    (replacement) --'joined', no address (Redis restarted empty since)--> killed, counted lost
                 while joining; another one is started after the backoff
    (replacement) --stops answering while being created or adopting the token--> admission taken
                 back, killed, counted lost while joining; another one after the backoff
    (Redis restarted empty) --token and alive written again--> the same members, the same token
    (the last member lost) --a new set started, joined, admitted under the same token--> every one
                 reopens the newest checkpoint (start_over)
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ftpipeline.barrier.existing import ExistingOutput
from ftpipeline.coordinator.errors import ExistingOutputFound, PipelineFailed
from ftpipeline.coordinator.losses import (record_applied, reopen_everywhere, restart_joining,
                                          resume_at_newest_checkpoint)
from ftpipeline.coordinator.protocol import Create, startup_decision
from ftpipeline.lineage.naming import WorkerId
from ftpipeline.lineage.placement import initial_placement
from ftpipeline.worker.sidecar import config_digest
from ftpipeline.worker.transport import Unreachable

if TYPE_CHECKING:
    from ftpipeline.coordinator.coordinator import Coordinator

log = logging.getLogger("ftpipeline.coordinator")
STATE_TIMEOUT_S = 5.0  # a running worker that does not answer by then is not taken over


def run_token(run_epoch: int) -> str:
    """Unique to one run even without a command log (run epoch 0): the epoch is for the people reading it."""
    return f"r{run_epoch}-{uuid.uuid4().hex[:8]}"


def worker_config(c: Coordinator) -> dict[str, Any]:
    """What ``create`` tells a worker: the pipeline, where the run stands, and whose it is."""
    return {"spec": c.spec.source_text, "base_dir": str(c.spec.base_dir), "committed": c.committed,
            "identity": c.spec.store_key, "label": c.spec.metrics_label, "chaining": c.spec.chaining,
            "reuse_plans": c.spec.reuse_plans, "kafka_bootstrap": c.spec.kafka_bootstrap}


def _admit(c: Coordinator, workers: list[WorkerId]) -> None:
    """Give ``workers`` this run's token, then name them its members in one transaction, and place the
    channels on them. Each one holds the token before the tables name it a member: until then a late
    completion of an earlier run (a worker taken over) finds no member at all and is dropped, rather than
    refused as a zombie's (which stops the worker)."""
    for w in workers:
        c.client(w).call("adopt", {"run": c.run_token})
    c.tables.begin_run(c.run_token, members=workers)
    c.placement = initial_placement(c.graph.channels(), workers)
    c.tables.set_placement(c.placement)


def _admit_a_new_set(c: Coordinator) -> None:
    """Start ``spec.workers`` workers, wait until every one joined, and admit them under the run's token."""
    c.members.start_initial(c.startup_timeout_s, c.observer.on_worker_joined, c.observer.on_workers_starting,
                            c.check_stop)
    _admit(c, c.workers)


def running_to_keep(c: Coordinator) -> list[WorkerId]:
    """The workers an earlier coordinator left running that this resumed run takes over: all of them, if
    every one answers, is not fenced, was created with what this run would create it with, and they are as
    many as the spec asks; else none, and they are killed (a new set is started, numbered after them)."""
    running = sorted(c.cluster.running()) if c.resume else []
    if not running:
        return []
    c.members.reserve(running)
    why, epochs = _check_running(c, running)
    c.observer.on_workers_kept(running, why)
    if why is None:
        # a checkpoint the earlier run had begun has no manifest, so its number would come again; a kept
        # worker may still report its snapshot for it: the new run's checkpoints are numbered after it
        c.ckpt.allocated = max([c.ckpt.allocated, *epochs])
        log.info("taking over the workers still running", extra={"workers": running})
        return running
    log.warning("not taking over the workers still running: starting a new set", extra={"workers": running,
                                                                                        "reason": why})
    for w in running:
        c.cluster.kill_worker(w)
    return []


def _check_running(c: Coordinator, running: list[WorkerId]) -> tuple[str | None, list[int]]:
    """Why ``running`` cannot be kept (None: they can), and the checkpoint epoch each one is in."""
    if len(running) != c.spec.workers:
        return f"{len(running)} running, the spec asks for {c.spec.workers}", []
    config = config_digest(worker_config(c))
    epochs: list[int] = []
    for w in running:
        if c.store.address(w) is None:
            return f"{w} has no address registered", []
        try:
            state = c.client(w).call("state", timeout_s=STATE_TIMEOUT_S)
        except Unreachable as exc:
            return f"{w} does not answer ({exc})", []
        if state.get("fenced"):
            return f"{w} is fenced off ({state['fenced']})", []
        if state.get("config") != config:
            return (f"{w} was created with another spec" if state.get("config") else f"{w} was never created"), []
        epochs.append(int(state.get("epoch") or 0))
    return None, epochs


def _take_over(c: Coordinator, kept: list[WorkerId]) -> bool:
    """Admit ``kept`` under this run's token (the ring kept them already); False if one stopped answering
    meanwhile: every kept worker is then killed, and the caller starts a new set."""
    c.observer.on_workers_starting(kept)
    try:
        _admit(c, kept)
    except Unreachable as exc:
        log.warning("a worker taken over stopped answering: starting a new set", extra={"error": str(exc)})
        for w in kept:
            c.cluster.kill_worker(w)
            c.journal.close_ring_around(w, "not taken over after all")  # the ring kept it: it leaves now
        return False
    c.members.take_over(kept)
    for i, w in enumerate(kept, 1):
        c.observer.on_worker_joined(w, i, len(kept))
    return True


def start_workers(c: Coordinator, kept: list[WorkerId]) -> None:
    """The run's start: the workers it took over (``running_to_keep``), or new ones once they joined, are
    admitted under this run's token."""
    taken_over = bool(kept) and _take_over(c, kept)
    if not taken_over:
        _admit_a_new_set(c)
        decision = startup_decision({w: c.client(w).call("state") for w in c.workers})
        if isinstance(decision, Create):
            if decision.shutdown_first:
                raise PipelineFailed(f"workers {', '.join(decision.shutdown_first)} are not fresh; "
                                     "a fresh run needs fresh workers")
            for w in c.workers:
                c.client(w).call("create", worker_config(c))
    if c.resume:
        resume_at_newest_checkpoint(c, reset=taken_over)
    else:  # a fresh run: no earlier run's output is kept silently, nor its checkpoints reopened
        problems = c.members.call_any("prepare_outputs", {}, "check the sinks for existing output")
        if problems:
            raise ExistingOutputFound([ExistingOutput(**p) for p in problems])
        if c.ckpt.pointer is not None:
            c.members.call_any("reset_checkpoints", {}, "empty the checkpoint storage")
    c.metrics.workers_ready.set(len(c.workers))


def start_over(c: Coordinator, dead: WorkerId, reason: str, cause: str = "") -> None:
    """The last worker is gone (a node that held them all, two losses and a third before any replacement
    joined): as Flink restarts a job whose every task manager died, start a new set of workers, admit
    them under the same run token, and roll them back to the newest committed checkpoint (none: the
    beginning, with the sinks' GT_last dropping the steps they already released). The run goes on."""
    detected = c.clock()
    manifest = c.ckpt.last
    log.error("every worker is lost: starting a new set from the newest checkpoint",
              extra={"worker": dead, "reason": reason, "committed": c.committed,
                     "boundary": int(manifest["boundary"]) if manifest else 0})
    c.ckpt.abort(f"worker {dead} lost, and no worker survives")
    backoff = c.members.start_over(detected, cause)
    c.metrics.workers_ready.set(0)
    while c.clock() - detected < backoff:
        c.check_stop()
        time.sleep(0.05)
    _admit_a_new_set(c)
    for w in c.workers:
        c.client(w).call("create", worker_config(c))
    record = replace(reopen_everywhere(c, manifest, detected), worker=dead, strategy="restart")
    record.seconds = c.clock() - detected
    record_applied(c, record)
    c.last_progress = c.clock()
    log.info("recovered", extra=record.summary())


def admit_newcomer(c: Coordinator, worker: WorkerId) -> None:
    """A replacement announced it joined: admit it, unless its registration went with Redis's state."""
    if c.store.address(worker) is None:  # announced to a Redis that has since restarted empty
        c.check_generation(now=True)
        if worker in c.members.joining:
            restart_joining(c, worker, "its registration is gone from Redis", charged=False)
        return
    c.tables.admit(worker)
    try:
        c.members.admit(worker, worker_config(c), c.committed)
        c.client(worker).call("adopt", {"run": c.run_token})
    except Unreachable as exc:  # it died right after joining: another replacement, after the backoff
        c.tables.expel(worker)
        c.members.unadmit(worker)
        restart_joining(c, worker, f"it stopped answering while being admitted ({exc})")
        return
    c.metrics.workers_ready.set(len(c.workers))
    c.observer.on_worker_joined(worker, len(c.workers), len(c.workers))
