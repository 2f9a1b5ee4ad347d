"""When is a checkpoint complete? A state machine per checkpoint epoch, at the coordinator.

Checkpoint ``e`` is the cut between epoch ``e-1`` and epoch ``e``. It is
complete when

1. every worker has taken its checkpoint for ``e`` (snapshots of its stateful
   channels written) and reported its *deficit*: how many epoch ``e-1``
   messages it sent minus how many it received, up to that moment;
2. the deficits, summed over all workers, minus the in-flight messages that
   workers received (and saved) after their checkpoint, reach zero: no
   epoch ``e-1`` message is still travelling;
3. the barrier has released every step up to the cut's boundary step, so the
   sinks' ``GT_last`` covers what the checkpoint claims (FlameStream's second
   condition for a resume point).

Then the coordinator commits it in ZooKeeper. A worker loss while it is in
progress aborts it: counts that involve a dead worker cannot be settled.

States and transitions (only through :meth:`CheckpointTracker._set_state`)::

    COLLECTING --all workers reported, deficit 0, boundary released--> COMPLETE
    COLLECTING --abort(reason)--> ABORTED
    COMPLETE   --committed()--> COMMITTED
    COMPLETE   --abort(reason)--> ABORTED        (the commit in ZooKeeper failed)
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any


class CheckpointState(str, enum.Enum):
    COLLECTING = "collecting"
    COMPLETE = "complete"
    COMMITTED = "committed"
    ABORTED = "aborted"


_ALLOWED = {
    CheckpointState.COLLECTING: {CheckpointState.COMPLETE, CheckpointState.ABORTED},
    CheckpointState.COMPLETE: {CheckpointState.COMMITTED, CheckpointState.ABORTED},
    CheckpointState.COMMITTED: set(),
    CheckpointState.ABORTED: set(),
}


@dataclass(frozen=True)
class ChannelSnapshot:
    channel: str     # "stage.index"
    step: int        # last step folded into the saved state
    path: str        # file in checkpoint storage ("" for an empty state)
    rows: int
    bytes: int


@dataclass
class CheckpointTracker:
    epoch: int
    boundary: int                     # last step whose sources ran in the previous epoch
    workers: frozenset[str]
    started_at: float
    state: CheckpointState = CheckpointState.COLLECTING
    reported: dict[str, int] = field(default_factory=dict)        # worker -> deficit at its checkpoint
    snapshots: dict[str, ChannelSnapshot] = field(default_factory=dict)
    inflight: dict[str, int] = field(default_factory=dict)        # object name -> rows (saved in storage)
    released: int = 0
    reason: str = ""

    def _set_state(self, state: CheckpointState, reason: str = "") -> None:
        if state not in _ALLOWED[self.state]:
            raise RuntimeError(f"checkpoint {self.epoch}: {self.state.value} -> {state.value} is not allowed")
        self.state = state
        self.reason = reason

    @property
    def deficit(self) -> int:
        return sum(self.reported.values()) - len(self.inflight)

    def worker_checkpointed(self, worker: str, deficit: int, snapshots: list[ChannelSnapshot]) -> None:
        if self.state is not CheckpointState.COLLECTING or worker not in self.workers:
            return
        self.reported[worker] = deficit
        for snap in snapshots:
            self.snapshots[snap.channel] = snap
        self._maybe_complete()

    def received_inflight(self, objects: dict[str, int]) -> None:
        if self.state is not CheckpointState.COLLECTING:
            return
        self.inflight.update(objects)
        self._maybe_complete()

    def boundary_released(self, step: int) -> None:
        self.released = max(self.released, step)
        if self.state is CheckpointState.COLLECTING:
            self._maybe_complete()

    def _maybe_complete(self) -> None:
        if set(self.reported) == set(self.workers) and self.deficit == 0 and self.released >= self.boundary:
            self._set_state(CheckpointState.COMPLETE)

    def committed(self) -> None:
        self._set_state(CheckpointState.COMMITTED)

    def abort(self, reason: str) -> None:
        if self.state in (CheckpointState.COLLECTING, CheckpointState.COMPLETE):
            self._set_state(CheckpointState.ABORTED, reason)

    def manifest(self, offsets: dict[str, int], gt_last: int) -> dict[str, Any]:
        """What is committed: the cut, enough to restore it."""
        return {
            "epoch": self.epoch,
            "boundary": self.boundary,
            "offsets": offsets,                  # source channel -> next offset after the boundary
            "gt_last": gt_last,
            "states": {c: dict(vars(s)) for c, s in sorted(self.snapshots.items())},
            "inflight": dict(sorted(self.inflight.items())),
        }
