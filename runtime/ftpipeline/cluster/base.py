"""The cluster backend: the only thing that differs between local and Kubernetes runs.

The coordinator starts, kills (fault injection) and watches workers only
through this interface; recovery itself never asks where a worker ran.
Local processes and pods report the same event — a worker is gone — from
different evidence: a process exit, a pod deletion.
"""

from __future__ import annotations

import abc

from ftpipeline.lineage.naming import WorkerId
from ftpipeline.worker.tls import Credentials


class ClusterBackend(abc.ABC):
    # The pipeline's credentials for worker traffic (``worker/tls.py``), issued by the backend that starts
    # the workers and handed to them; the coordinator calls workers with them. None: plain gRPC.
    credentials: Credentials | None = None
    # the evidence a loss this backend reports is found by, as the terminal and the status word it
    detects = "the cluster"

    @abc.abstractmethod
    def start_worker(self, worker: WorkerId) -> None:
        """Start a worker; it registers itself and announces ``joined`` when ready."""

    @abc.abstractmethod
    def kill_worker(self, worker: WorkerId) -> None:
        """Kill a worker abruptly (SIGKILL, pod deletion with no grace): fault injection."""

    def declare_lost(self, worker: WorkerId, reason: str) -> None:
        """The command log reported ``worker`` dead while the backend still sees it; it will be killed
        and must not be reported lost again. A backend that records why workers went notes it here."""

    def evict_worker(self, worker: WorkerId) -> None:
        """Ask a worker to leave, as a drain does (SIGTERM to each of its processes, the Eviction API for a
        pod): it hands its channels over (``coordinator/evacuation.py``) and is then killed."""
        raise NotImplementedError(f"{type(self).__name__} cannot evict workers")

    def pause_worker(self, worker: WorkerId, zombie: bool = False) -> None:
        """Fault injection: stop a worker without killing it (alive but silent). With ``zombie``, a
        later ``kill_worker`` does not reach it: it wakes up instead, as after a healed partition."""
        raise NotImplementedError(f"{type(self).__name__} cannot pause workers")

    def why(self, worker: WorkerId) -> str:
        """One line on why a lost worker went (exit code, pod failure), for status and errors."""
        return "see its logs"

    def cannot_run(self, worker: WorkerId) -> str | None:
        """Why a lost worker stopped for a reason its replacement would meet too (``worker/exits.py``), in
        one line; None for any other loss, which recovery handles."""
        return None

    def running(self) -> list[WorkerId]:
        """Workers of this pipeline already up when a coordinator starts: started by an earlier one (an
        operator that handed over, a coordinator restarted in the same process), which a resumed run
        may take over instead of starting new ones (``coordinator/admission.py``). None by default."""
        return []

    @abc.abstractmethod
    def lost(self) -> list[WorkerId]:
        """Workers found gone since the last call (each reported once)."""

    @abc.abstractmethod
    def stop(self) -> None:
        """Stop every worker (end of run)."""
