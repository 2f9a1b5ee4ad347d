"""How the coordinator finds out a worker is gone, and how a test makes it so: the detection protocol.

Three ways a loss reaches the coordinator, each turned into ``recover``
(``losses.py``):

    a process exits / a pod is deleted   --ClusterBackend.lost()-->  LOST ("gone")
    a ring member reports a vanished heartbeat in the command log
        --the worker does not answer its control API--> LOST ("heartbeat expired"; killed to be sure)
        --the worker answers--> kept: its session died with a ZooKeeper fault, not the worker, and it
                                re-registers by itself (``commandlog/peer.py``); counted as
                                control_plane_faults{zookeeper, worker_rejoined}
    a kept worker (on probation) not back in the ring within a few session timeouts
        --it does not answer--> LOST (it hung or was cut off before it re-registered: with no
                                heartbeat, no ring member would ever report it)
        --it answers--> looked at again later

A call the coordinator makes in the middle of something else (telling the
workers a step or a checkpoint began, reopening a checkpoint, admitting a
replacement) may reach a worker that died a moment ago, before either way
above reported it. Such a call raises ``Unreachable`` (``worker/transport.py``)
and is never the run's end: the step goes on, the checkpoint is aborted, the
rollback goes on without it, the replacement is started again; the loss
itself arrives by one of the ways above and is recovered like any other.

An expired heartbeat is a suspicion, not a verdict: a ZooKeeper restart or a
cut expires every session at once, and declaring each worker dead would
turn one outage into N recoveries (or a failed run when none survives).

Fault injection (``ftpipeline run --kill-at-step``, ``--fault stop|zombie``)
lives here too: it is the same event seen from the other side.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ftpipeline.lineage.naming import WorkerId
from ftpipeline.worker.transport import call_each

if TYPE_CHECKING:
    from ftpipeline.coordinator.coordinator import Coordinator

log = logging.getLogger("ftpipeline.coordinator")


def answers(c: Coordinator, worker: WorkerId, action: str = "state") -> dict[str, object] | None:
    """The worker's answer to ``action`` within 2 s, or None: alive and reachable, or not."""
    try:
        reply = c.client(worker).call(action, timeout_s=2)
        return reply if isinstance(reply, dict) else {}
    except Exception:
        return None


def _rejoin_window_s(c: Coordinator) -> float:
    """How long a kept worker has to rejoin: a few of its session timeouts, at least 10 s."""
    return max(10.0, 3 * c.spec.heartbeat_timeout_ms / 1000)


def follow_deaths(c: Coordinator) -> None:
    """Deaths reported in the command log, confirmed (or not) by calling the worker; then the kept
    workers that have not rejoined."""
    deaths = [(worker, by, reason) for worker, by, reason in c.journal.deaths() if worker in c.workers]
    # asked at once: a node lost takes several workers, and each silent one costs the whole timeout
    alive = {w for w, answer in call_each({w: c.client(w) for w, _, _ in deaths}, "state", timeout_s=2).items()
             if not isinstance(answer, Exception)}
    for worker, by, reason in deaths:
        if worker not in c.workers:
            continue
        if worker in alive:
            log.warning("heartbeat expired but the worker answers: a ZooKeeper fault, not a death",
                        extra={"worker": worker, "by": by, "reason": reason})
            c.metrics.control_plane_faults.labels(c.spec.metrics_label, "zookeeper", "worker_rejoined").inc()
            c.probation[worker] = c.clock() + _rejoin_window_s(c)
            continue
        log.warning("worker declared dead in the command log", extra={"worker": worker, "by": by, "reason": reason})
        _declare_dead(c, worker, f"reported by its ring neighbour {by.split('.')[0]}")
    follow_rejoins(c)


def follow_rejoins(c: Coordinator) -> None:
    """A kept worker must come back into the ring. One that was stopped or cut off after it answered,
    before it re-registered, has no heartbeat any more for anyone to watch: unless the coordinator
    looks again, nothing would ever find it."""
    if not c.probation or not c.control.available("zookeeper"):
        return  # during an outage it cannot rejoin, and nothing is decided
    follower = c.journal.follower
    ring = set(follower.state.members.values()) if follower is not None else set()
    now = c.clock()
    for worker, due in list(c.probation.items()):
        if worker not in c.workers or worker in ring:
            del c.probation[worker]
            continue
        if now < due:
            continue
        if answers(c, worker) is not None:
            log.warning("a worker kept after its heartbeat expired has not rejoined the ring yet, but answers",
                        extra={"worker": worker})
            c.probation[worker] = now + _rejoin_window_s(c)
            continue
        del c.probation[worker]
        log.warning("a worker kept after its heartbeat expired did not rejoin the ring and does not answer: "
                    "declared dead", extra={"worker": worker})
        _declare_dead(c, worker, "did not rejoin the ring after its heartbeat expired")


def _declare_dead(c: Coordinator, worker: WorkerId, why: str) -> None:
    c.heartbeat_losses += 1
    c.metrics.heartbeat_losses.inc()
    c.cluster.declare_lost(worker, why)
    how = (f"heartbeat expiry after {c.spec.heartbeat_timeout_ms} ms ({why}), and it did not answer; "
           "it is killed to be sure")
    c.lost(worker, "heartbeat expired", how)  # this reason tells the journal the ring closed around it already
    # then make sure: a hung pod or process must not linger. Fenced first (recovery took it out of the
    # run), so one that wakes up instead of dying (a healed partition) can commit nothing
    c.cluster.kill_worker(worker)


def inject_faults(c: Coordinator) -> None:
    """The run's fault plan, if it is due: kill a worker, or stop it while it runs a task (so that a
    zombie has something to commit when it wakes)."""
    f = c.faults
    if f is None or not f.due(c.triggered, c.done_in_step(f.at_step or 0), c.elapsed(), c.ckpt.busy):
        return
    victim = f.victim(c.workers)
    if f.action in ("kill", "evict"):
        f.fired = True
        log.warning(f"fault injection: {'killing' if f.action == 'kill' else 'evicting'} worker",
                    extra={"worker": victim, "step": c.triggered})
        (c.cluster.kill_worker if f.action == "kill" else c.cluster.evict_worker)(victim)
        return
    stats = answers(c, victim, "stats")
    if stats is not None and int(str(stats.get("running", 0))) > 0:
        f.fired = True
        log.warning("fault injection: stopping worker", extra={"worker": victim, "step": c.triggered,
                                                               "zombie": f.action == "zombie"})
        c.cluster.pause_worker(victim, zombie=f.action == "zombie")
