"""A worker asked to go (a drain's eviction, SIGTERM) hands its channels over before it does.

Kubernetes sends SIGTERM to each container of an evicted pod and waits its
grace period before SIGKILL; ``ftpipeline run`` does the same to a worker
it evicts. Dying at once would make the eviction a loss, recovered by
replaying work. Instead the sidecar tells the coordinator, which holds new
steps, lets the steps in flight commit, and asks for a snapshot of this
worker's states alone; the survivors load them and the worker is let go
(``coordinator/evacuation.py``). The sidecar's side, as states:

    RUNNING --SIGTERM--> LEAVING ('leaving' in the inbox)
    LEAVING --'handover' (epoch)--> SNAPSHOT DUE --no task running--> the Spark
            process snapshots every state it holds as that epoch ('checkpointed')
    any --'shutdown' / killed by the coordinator--> gone
    LEAVING --let go by the run (a plain deletion, recovered as a loss)--> exits
    LEAVING --no handover within LEAVE_WAIT_S (no coordinator listens)--> exits;
            the run, if any, finds it lost

A SIGTERM after the coordinator's ``shutdown`` (the end of a run) ends the
process as before.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ftpipeline.worker.sidecar import Sidecar

log = logging.getLogger("ftpipeline.sidecar")

# How long a leaving worker waits for its handover to begin before it exits anyway: under the 30 s a
# worker pod's grace period gives, above a few steps' time.
LEAVE_WAIT_S = float(os.environ.get("FTPIPELINE_LEAVE_WAIT_S", "25"))


class Leaving:
    def __init__(self, sidecar: Sidecar) -> None:
        self.sidecar = sidecar
        self.requested = threading.Event()
        self.epoch: int | None = None   # the handover snapshot's epoch, once asked
        self._given = False             # the snapshot was handed to the Spark process

    def request(self) -> None:
        """SIGTERM arrived (called on the main thread): tell the coordinator, from another thread."""
        if self.sidecar.stopping.is_set() or self.requested.is_set():
            return
        self.requested.set()
        threading.Thread(target=self._announce, name="leaving", daemon=True).start()

    def _announce(self) -> None:
        worker = self.sidecar.worker
        if self.sidecar.spec is None or not self._member():  # joining, or let go already: nothing to hand over
            log.info("asked to leave, with nothing to hand over: leaving", extra={"worker": worker})
            self.sidecar.stopping.set()
            return
        log.warning("asked to leave: handing this worker's channels over", extra={"worker": worker})
        try:
            self.sidecar.store.send({"t": "leaving", "w": worker})
        except Exception as exc:  # Redis out of reach: no handover can be asked, so go as a loss would
            log.error("could not ask for a handover", extra={"worker": worker, "error": str(exc)})
            self.sidecar.stopping.set()
            return
        deadline = time.monotonic() + LEAVE_WAIT_S
        while not self.sidecar.stopping.wait(0.5):
            if not self._member():  # let go already (a deletion recovered as a loss): nothing to hand over
                log.info("let go by the run: leaving", extra={"worker": worker})
                break
            if self.epoch is None and time.monotonic() > deadline:
                log.error("no handover began: leaving as a lost worker", extra={"worker": worker, "waited_s": LEAVE_WAIT_S})
                break
        self.sidecar.stopping.set()

    def _member(self) -> bool:
        try:
            return self.sidecar.still_member()
        except Exception:  # Redis out of reach: still a member as far as this worker knows
            return True

    def handover(self, epoch: int) -> None:
        """The coordinator holds the steps: snapshot for ``epoch`` once no task runs (under the sidecar's lock)."""
        self.epoch, self._given = epoch, False

    def snapshot_due(self, idle: bool) -> int | None:
        """The epoch to snapshot now, once (under the sidecar's lock); None otherwise."""
        if self.epoch is None or self._given or not idle:
            return None
        self._given = True
        return self.epoch
