"""Who runs the pipeline: workers started, joining and joined, and their replacements.

The coordinator's step loop asks this module which workers exist and how to
reach them; it never starts a process or a pod itself. A worker's life as
the coordinator sees it:

    (none)  --spawn: cluster.start_worker--> JOINING
    (none)  --running when the run resumed, taken over--> MEMBER (as an earlier coordinator created it)
    JOINING --'joined' event--> MEMBER (created: its sidecar knows the pipeline)
    JOINING --lost before joining--> (none), a replacement scheduled
    JOINING --its registration lost with Redis's state--> (none), a replacement after the next commit, uncharged
    MEMBER  --lost--> (none), a replacement scheduled
    MEMBER  --lost, and it was the last one--> a whole new set spawned (start_over, start_initial)
    SCHEDULED --backoff passed and a step committed since the loss--> JOINING

Replacements are rationed by the restart budget (``restarts.py``): the run
fails once it is spent. A replacement is not waited for; once it joins it is
a *newcomer* until it took stateless channels back at a step boundary
(``lineage/placement.py``).

Calls that go to every worker (a step started, a checkpoint, a wake-up after
a recovery) are fanned out at once (``call_all``): a step starts on all
workers after one round trip, not one per worker. Such a call is a nudge (the
work itself is in the lineage tables), so it waits no longer than a worker's
heartbeat timeout: a worker whose node was lost never answers, and the loop
must get on to the heartbeat reports that say so (``detection.py``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from ftpipeline.cluster.base import ClusterBackend
from ftpipeline.control.store import RunStore
from ftpipeline.coordinator.errors import CannotRun, NoMemberAnswers, PipelineFailed
from ftpipeline.coordinator.restarts import BudgetExhausted, RestartBudget, RestartPolicy
from ftpipeline.lineage.naming import Channel, WorkerId
from ftpipeline.lineage.placement import hand_back
from ftpipeline.obs.errors import one_line
from ftpipeline.spec.model import PipelineSpec
from ftpipeline.worker.transport import SidecarClient, call_each

log = logging.getLogger("ftpipeline.coordinator")


def worker_name(number: int) -> WorkerId:
    """The name of the ``number``-th worker a coordinator starts (from 0: a fresh run's are w0, w1, ...)."""
    return WorkerId(f"w{number}")


class Members:
    def __init__(self, spec: PipelineSpec, cluster: ClusterBackend, store: RunStore, clock: Callable[[], float]) -> None:
        self.spec = spec
        self.cluster = cluster
        self.store = store
        self.clock = clock
        self.workers: list[WorkerId] = []       # members, sorted
        self.joining: list[WorkerId] = []
        self.newcomers: list[WorkerId] = []     # joined replacements that have not taken channels back yet
        self.joins: list[dict[str, Any]] = []   # replacements: worker, committed step at join
        self.restarts = RestartBudget(RestartPolicy(
            spec.restart_max, spec.restart_window_s, spec.backoff_initial_ms, spec.backoff_max_ms,
            spec.backoff_jitter_percent))
        self._clients: dict[WorkerId, SidecarClient] = {}
        self._spawned = 0
        self._replacements: list[tuple[float, int]] = []  # (not before, committed step at the loss)
        self._answered: WorkerId | None = None  # the member that last did a call_any: asked first next time

    # --- reaching workers ----------------------------------------------------
    def client(self, worker: WorkerId) -> SidecarClient:
        c = self._clients.get(worker)
        if c is None:
            address = self.store.address(worker)
            if address is None:
                raise PipelineFailed(f"worker {worker} has not registered an address")
            c = self._clients[worker] = SidecarClient(address, credentials=self.cluster.credentials)
        return c

    def clients_for(self, workers: list[WorkerId]) -> dict[WorkerId, SidecarClient]:
        return {w: self.client(w) for w in workers}

    def call_all(self, workers: Iterable[WorkerId], action: str, body: dict[str, Any] | None = None,
                 timeout_s: float | None = None) -> dict[WorkerId, Any]:
        """Call ``action`` on every one of ``workers`` at once; each one's answer, or the exception its
        call raised (the caller decides what a worker that did not answer means)."""
        clients: dict[WorkerId, Any] = {}
        for w in workers:
            try:
                clients[w] = self.client(w)
            except PipelineFailed as exc:  # no address registered
                clients[w] = exc
        reachable = {w: c for w, c in clients.items() if isinstance(c, SidecarClient)}
        return {**clients, **call_each(reachable, action, body, timeout_s or self.nudge_timeout_s)}

    @property
    def nudge_timeout_s(self) -> float:
        """How long a fanned-out call waits for each worker: its heartbeat timeout, at least 2 s."""
        return max(2.0, self.spec.heartbeat_timeout_ms / 1000)

    def call_any(self, action: str, body: dict[str, Any], what: str) -> Any:
        """Call ``action`` on the first member that answers: for idempotent work any worker can do. The one that
        answered last is asked first: a member that answers its state but not the action (a sidecar whose
        Kafka client hangs) would otherwise cost every step the action's whole deadline."""
        why = "no member"
        first = [self._answered] if self._answered in self.workers else []
        for w in first + [m for m in self.workers if m not in first]:
            try:
                # a worker whose node is gone would hold the call to its whole deadline: asked briefly first
                self.client(w).call("state", timeout_s=2)
                answer = self.client(w).call(action, body)
                self._answered = w
                return answer
            except Exception as exc:
                log.warning("call failed", extra={"action": action, "worker": w, "error": str(exc)})
                why = f"{w}: {one_line(exc)}"
        raise NoMemberAnswers(f"no worker could {what} (last: {why})")

    # --- joining -------------------------------------------------------------
    def spawn(self) -> WorkerId:
        worker = worker_name(self._spawned)
        self._spawned += 1
        self.cluster.start_worker(worker)
        self.joining.append(worker)
        return worker

    def start_initial(self, timeout_s: float, on_joined: Callable[[WorkerId, int, int], None],
                      on_started: Callable[[list[WorkerId]], None], check_stop: Callable[[], None]) -> None:
        """Start ``spec.workers`` workers and wait until every one joined."""
        initial = [self.spawn() for _ in range(self.spec.workers)]
        on_started(initial)
        deadline = self.clock() + timeout_s
        joined: list[WorkerId] = []
        while len(joined) < len(initial):
            if self.clock() > deadline:
                raise PipelineFailed(f"workers did not start within {timeout_s:.0f}s "
                                     f"(joined: {', '.join(joined) or 'none'})")
            for event in self.store.receive(0.05):
                if event["t"] == "joined" and event["w"] in initial and event["w"] not in joined:
                    joined.append(event["w"])
                    on_joined(event["w"], len(joined), len(initial))
            for lost in self.cluster.lost():
                self.check_can_run(lost)
                if lost in initial:  # (one of a set that is gone, killed before this one started: no news)
                    raise PipelineFailed(f"worker {lost} was lost during start-up: {self.cluster.why(lost)}")
            check_stop()
        self.joining = []
        self.workers = sorted(initial)

    def check_can_run(self, lost: WorkerId) -> None:
        """A lost worker that stopped for a reason its replacement would share ends the run (``CannotRun``)."""
        reason = self.cluster.cannot_run(lost)
        if reason is not None:
            raise CannotRun(lost, reason)

    def reserve(self, workers: Iterable[WorkerId]) -> None:
        """Workers of an earlier coordinator still hold these ids (their pods, their directories): the
        ones this run starts are numbered after them."""
        numbers = [int(w[1:]) for w in workers if w[1:].isdigit()]
        self._spawned = max([self._spawned, *(n + 1 for n in numbers)])

    def take_over(self, workers: list[WorkerId]) -> None:
        """Workers an earlier coordinator started, admitted to this run as they are (``admission.py``)."""
        self.reserve(workers)
        self.joining = []
        self.workers = sorted(workers)

    def admit(self, worker: WorkerId, config: dict[str, Any], committed: int) -> None:
        """A replacement joined: create it and make it a member (a newcomer until it takes channels back)."""
        self.joining.remove(worker)
        self.client(worker).call("create", config)
        self.workers = sorted([*self.workers, worker])
        self.newcomers.append(worker)
        self.joins.append({"worker": worker, "committed": committed})

    def unadmit(self, worker: WorkerId) -> None:
        """An admission that did not complete: the worker is joining again, as far as this run knows."""
        self.remove(worker)
        self.joins = [j for j in self.joins if j["worker"] != worker]
        if worker not in self.joining:
            self.joining.append(worker)

    def hand_back(self, placement: dict[Channel, WorkerId], is_stateful: Callable[[str], bool]
                  ) -> tuple[dict[Channel, WorkerId], dict[Channel, WorkerId]]:
        """Newcomers take stateless channels back; returns the new placement and what moved."""
        moved: dict[Channel, WorkerId] = {}
        for worker in self.newcomers:
            others = [w for w in self.workers if w != worker]
            placement, moves = hand_back(placement, worker, others, is_stateful)
            moved.update(moves)
            log.info("hand back", extra={"worker": worker, "channels": sorted(c.key() for c in moves)})
        self.newcomers = []
        return placement, moved

    # --- losing --------------------------------------------------------------
    def knows(self, worker: WorkerId) -> bool:
        return worker in self.workers or worker in self.joining

    def lost_while_joining(self, worker: WorkerId, now: float, committed: int, cause: str = "") -> bool:
        """A replacement that died before joining: try again after a backoff. False if it was a member."""
        if worker not in self.joining:
            return False
        self.joining.remove(worker)
        self.schedule_replacement(now, committed, cause)
        return True

    def requeue(self, worker: WorkerId, now: float, committed: int) -> None:
        """A replacement still joining whose registration Redis lost: another starts after the next
        commit. Not charged to the restart budget: the outage took it, not a fault of its own (charged,
        one Redis restart with two replacements joining spent a budget of five, chaos schedule 1)."""
        if worker in self.joining:
            self.joining.remove(worker)
            self.replace_planned(now, committed)

    def remove(self, worker: WorkerId) -> None:
        self.workers = [w for w in self.workers if w != worker]
        self._clients.pop(worker, None)
        self.newcomers = [w for w in self.newcomers if w != worker]

    def schedule_replacement(self, now: float, committed: int, cause: str = "") -> None:
        """Ration replacements (restart budget, backoff); the run fails once the budget is spent, naming
        ``cause``, the loss that spent it (the remedy is there: a missing function, an OOM kill...)."""
        try:
            delay = self.restarts.on_loss(now)
        except BudgetExhausted as exc:
            raise PipelineFailed(_spent(exc, cause)) from exc
        self._replacements.append((now + delay, committed))

    def replace_planned(self, now: float, committed: int) -> None:
        """A worker let go by plan (a drain's handover): replaced after the next commit, not charged to the
        restart budget."""
        self._replacements.append((now, committed))

    def start_over(self, now: float, cause: str = "") -> float:
        """The last member is gone: a whole new set will replace it, the replacements still joining or
        due included (those are killed or forgotten). The loss is charged to the restart budget like any
        other; returns the backoff before the new set starts."""
        for worker in self.joining:
            self.cluster.kill_worker(worker)
        for client in self._clients.values():
            client.close()
        self.workers, self.joining, self.newcomers, self._replacements, self._clients = [], [], [], [], {}
        try:
            return self.restarts.on_loss(now)
        except BudgetExhausted as exc:
            raise PipelineFailed(_spent(exc, cause)) from exc

    def start_replacements(self, committed: int) -> None:
        """Start each replacement whose backoff has passed, once a step committed since its loss
        (so a new JVM does not compete with the survivors while they recover)."""
        now = self.clock()
        due = [r for r in self._replacements if r[0] <= now and committed > r[1]]
        for r in due:
            self._replacements.remove(r)
            log.info("starting replacement", extra={"worker": self.spawn()})

    def shutdown(self, workers: bool = True) -> None:
        for w in self.workers if workers else ():
            try:
                self.client(w).call("shutdown", timeout_s=2)
            except Exception:  # best effort: the backend stops processes anyway
                pass
        for c in self._clients.values():
            c.close()


def _spent(exc: BudgetExhausted, cause: str) -> str:
    return f"{cause}; {exc}" if cause else str(exc)
