"""Control-plane faults as states of a run, not crashes: ZooKeeper or Redis out of reach pauses it.

The coordinator writes every decision to ZooKeeper first and keeps the
lineage in Redis; when either is out of reach it cannot decide safely, and
it must not give up either: a restart or a network blip of a few seconds to
a few minutes is ordinary in a cluster. So every call the run depends on
goes through :meth:`ControlPlane.call`, which retries it by a
:class:`Backoff` policy, and the component's state is tracked::

    AVAILABLE   --a call fails as unreachable--> UNAVAILABLE
                   (one log line naming the component and the error,
                    ftpipeline_control_plane_faults_total{component, outcome="paused"},
                    Observer.on_control_plane(component, False, why): a condition and an Event)
    UNAVAILABLE --the call, tried again, fails--> UNAVAILABLE (the run stays paused; a stop
                   request is still honoured between tries)
    UNAVAILABLE --the call succeeds--> AVAILABLE
                   (log line with the outage's length, outcome="resumed", on_control_plane(.., True, ..))

A ZooKeeper request made while the connection is down does not fail: kazoo
holds it until the session is back (or expired). So the ZooKeeper client's
own state is watched too (:meth:`ControlPlane.watch_zookeeper`): SUSPENDED
or LOST makes ZooKeeper UNAVAILABLE, CONNECTED makes it AVAILABLE, reported
from a thread of its own while the coordinator's request waits.

While a component is UNAVAILABLE the coordinator's thread is inside the
retry (or the held request): it starts no step, declares no worker lost and commits nothing, which
is what "decide nothing while your own view is suspended" asks. What it
missed meanwhile (completions, deaths in the log, pod events) waits where it
was queued and is handled once the call returns.
"""

from __future__ import annotations

import contextvars
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from ftpipeline.obs.errors import one_line

log = logging.getLogger("ftpipeline.coordinator.outages")
T = TypeVar("T")


@dataclass(frozen=True)
class Backoff:
    """Delays between tries: ``initial_s``, times ``factor`` each time, never above ``max_s``; forever."""

    initial_s: float = 0.1
    factor: float = 2.0
    max_s: float = 1.0

    def delays(self) -> Iterator[float]:
        delay = self.initial_s
        while True:
            yield delay
            delay = min(delay * self.factor, self.max_s)


class Reporter(Protocol):
    def on_control_plane(self, component: str, available: bool, message: str) -> None: ...


class ControlPlane:
    def __init__(self, faults: Any, label: str, reporter: Reporter, check_stop: Callable[[], None],
                 backoff: Backoff = Backoff(), clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.faults = faults            # the ftpipeline_control_plane_faults_total family
        self.label = label
        self.reporter = reporter
        self.check_stop = check_stop
        self.backoff = backoff
        self.clock = clock
        self.sleep = sleep
        self.down: dict[str, float] = {}  # component -> when it became unavailable
        self.outages: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._watched: Any = None

    def available(self, component: str) -> bool:
        return component not in self.down

    def call(self, component: str, fn: Callable[[], T], unreachable: tuple[type[BaseException], ...],
             what: str = "") -> T:
        """``fn()``, tried again (by the backoff) for as long as ``component`` is unreachable."""
        for delay in self.backoff.delays():
            try:
                result = fn()
            except unreachable as exc:
                self.unavailable(component, f"{what + ': ' if what else ''}{one_line(exc)}")
                self.check_stop()
                self.sleep(delay)
                continue
            self.recovered(component)
            return result
        raise AssertionError("unreachable: the backoff never ends")

    def watch_zookeeper(self, zk: Any) -> None:
        """Report the ZooKeeper session's own state changes (SUSPENDED, LOST, CONNECTED).

        kazoo calls listeners on its own thread, where no ZooKeeper call may be made; the reports go
        to one thread of ours, in the order the changes came (a blip's CONNECTED must not overtake its
        SUSPENDED), and run in the context of the thread that started watching (the operator posts
        Events through a library that keeps its settings in context variables)."""
        changes: queue.SimpleQueue[str | None] = queue.SimpleQueue()

        def report() -> None:
            while (state := changes.get()) is not None:
                if state == "CONNECTED":
                    self.recovered("zookeeper")
                else:
                    self.unavailable("zookeeper", "session expired" if state == "LOST" else "connection lost")

        def listener(state: str) -> None:
            changes.put(state)

        context = contextvars.copy_context()
        threading.Thread(target=context.run, args=(report,), daemon=True, name="zookeeper-state").start()
        zk.add_listener(listener)
        self._watched = (zk, listener, changes)

    def unwatch(self) -> None:
        if self._watched is not None:
            zk, listener, changes = self._watched
            zk.remove_listener(listener)
            changes.put(None)
            self._watched = None

    def unavailable(self, component: str, why: str) -> None:
        with self._lock:
            if component in self.down:
                return
            self.down[component] = self.clock()
        message = f"{component} unreachable, the run is paused until it answers: {why}"
        log.warning("control plane unavailable", extra={"component": component, "error": why})
        self.faults.labels(self.label, component, "paused").inc()
        self.reporter.on_control_plane(component, False, message)

    def recovered(self, component: str, outcome: str = "resumed", note: str = "") -> None:
        with self._lock:
            since = self.down.pop(component, None)
        if since is None:
            return
        seconds = round(self.clock() - since, 3)
        self.outages.append({"component": component, "seconds": seconds, "outcome": outcome})
        log.warning("control plane available again", extra={"component": component, "seconds": seconds,
                                                             "outcome": outcome})
        self.faults.labels(self.label, component, outcome).inc()
        self.reporter.on_control_plane(component, True, f"{component} answers again after {seconds:.1f} s"
                                       f"{'; ' + note if note else ''}; the run continues")
