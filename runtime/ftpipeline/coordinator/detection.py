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

:class:`Detection` owns what this protocol keeps: the workers on probation
(kept after a heartbeat loss, until they rejoin) and the heartbeat losses
counted; a loss it finds goes to ``on_lost`` (the coordinator's recovery).
Fault injection (``ftpipeline run --kill-at-step``, ``--fault stop|zombie``)
lives here too: it is the same event seen from the other side.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from ftpipeline.cluster.base import ClusterBackend
from ftpipeline.coordinator.faults import FaultPlan
from ftpipeline.coordinator.journal import Journal
from ftpipeline.coordinator.members import Members
from ftpipeline.coordinator.outages import ControlPlane
from ftpipeline.lineage.naming import WorkerId
from ftpipeline.obs.metrics import RunMetrics
from ftpipeline.spec.model import PipelineSpec
from ftpipeline.worker.transport import SidecarClient, call_each

log = logging.getLogger("ftpipeline.coordinator")


def answers(client: SidecarClient, action: str = "state") -> dict[str, object] | None:
    """The worker's answer to ``action`` within 2 s, or None: alive and reachable, or not."""
    try:
        reply = client.call(action, timeout_s=2)
        return reply if isinstance(reply, dict) else {}
    except Exception:
        return None


class Detection:
    def __init__(self, spec: PipelineSpec, members: Members, journal: Journal, control: ControlPlane,
                 cluster: ClusterBackend, metrics: RunMetrics, clock: Callable[[], float],
                 on_lost: Callable[[WorkerId, str, str], None]) -> None:
        self.spec, self.members, self.journal, self.control = spec, members, journal, control
        self.cluster, self.metrics, self.clock, self.on_lost = cluster, metrics, clock, on_lost
        self.probation: dict[WorkerId, float] = {}  # kept after a heartbeat loss, until they rejoin: when to look
        self.heartbeat_losses = 0

    def _rejoin_window_s(self) -> float:
        """How long a kept worker has to rejoin: a few of its session timeouts, at least 10 s."""
        return max(10.0, 3 * self.spec.heartbeat_timeout_ms / 1000)

    def follow_deaths(self) -> None:
        """Deaths reported in the command log, confirmed (or not) by calling the worker; then the kept
        workers that have not rejoined."""
        workers = self.members.workers
        deaths = [(worker, by, reason) for worker, by, reason in self.journal.deaths() if worker in workers]
        # asked at once: a node lost takes several workers, and each silent one costs the whole timeout
        asked = call_each({w: self.members.client(w) for w, _, _ in deaths}, "state", timeout_s=2)
        alive = {w for w, answer in asked.items() if not isinstance(answer, Exception)}
        for worker, by, reason in deaths:
            if worker not in self.members.workers:
                continue
            if worker in alive:
                log.warning("heartbeat expired but the worker answers: a ZooKeeper fault, not a death",
                            extra={"worker": worker, "by": by, "reason": reason})
                self.metrics.control_plane_faults.labels(self.spec.metrics_label, "zookeeper",
                                                         "worker_rejoined").inc()
                self.probation[worker] = self.clock() + self._rejoin_window_s()
                continue
            log.warning("worker declared dead in the command log", extra={"worker": worker, "by": by,
                                                                          "reason": reason})
            self._declare_dead(worker, f"reported by its ring neighbour {by.split('.')[0]}")
        self.follow_rejoins()

    def follow_rejoins(self) -> None:
        """A kept worker must come back into the ring. One that was stopped or cut off after it answered,
        before it re-registered, has no heartbeat any more for anyone to watch: unless the coordinator
        looks again, nothing would ever find it."""
        if not self.probation or not self.control.available("zookeeper"):
            return  # during an outage it cannot rejoin, and nothing is decided
        follower = self.journal.follower
        ring = set(follower.state.members.values()) if follower is not None else set()
        now = self.clock()
        for worker, due in list(self.probation.items()):
            if worker not in self.members.workers or worker in ring:
                del self.probation[worker]
                continue
            if now < due:
                continue
            if answers(self.members.client(worker)) is not None:
                log.warning("a worker kept after its heartbeat expired has not rejoined the ring yet, but answers",
                            extra={"worker": worker})
                self.probation[worker] = now + self._rejoin_window_s()
                continue
            del self.probation[worker]
            log.warning("a worker kept after its heartbeat expired did not rejoin the ring and does not answer: "
                        "declared dead", extra={"worker": worker})
            self._declare_dead(worker, "did not rejoin the ring after its heartbeat expired")

    def _declare_dead(self, worker: WorkerId, why: str) -> None:
        self.heartbeat_losses += 1
        self.metrics.heartbeat_losses.inc()
        self.cluster.declare_lost(worker, why)
        how = (f"heartbeat expiry after {self.spec.heartbeat_timeout_ms} ms ({why}), and it did not answer; "
               "it is killed to be sure")
        self.on_lost(worker, "heartbeat expired", how)  # this reason tells the journal the ring closed already
        # then make sure: a hung pod or process must not linger. Fenced first (recovery took it out of the
        # run), so one that wakes up instead of dying (a healed partition) can commit nothing
        self.cluster.kill_worker(worker)


def inject_faults(plan: FaultPlan | None, step: int, done_in_step: Callable[[int], int], seconds: float,
                  checkpointing: bool, members: Members, cluster: ClusterBackend) -> None:
    """The run's fault plan, if it is due: kill a worker, or stop it while it runs a task (so that a
    zombie has something to commit when it wakes)."""
    if plan is None or not plan.due(step, done_in_step(plan.at_step or 0), seconds, checkpointing):
        return
    victim = plan.victim(members.workers)
    if plan.action in ("kill", "evict"):
        plan.fired = True
        log.warning(f"fault injection: {'killing' if plan.action == 'kill' else 'evicting'} worker",
                    extra={"worker": victim, "step": step})
        (cluster.kill_worker if plan.action == "kill" else cluster.evict_worker)(victim)
        return
    stats = answers(members.client(victim), "stats")
    if stats is not None and int(str(stats.get("running", 0))) > 0:
        plan.fired = True
        log.warning("fault injection: stopping worker", extra={"worker": victim, "step": step,
                                                               "zombie": plan.action == "zombie"})
        cluster.pause_worker(victim, zombie=plan.action == "zombie")
