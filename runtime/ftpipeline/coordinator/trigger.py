"""When to start the next step: Feldera's trigger reasons, as a pure state machine.

Reasons, in the order they are checked:

1. ``replay`` — the step is already in the step log (recorded before a
   failure or restart); it is re-run at once with its recorded offsets;
2. ``records`` — at least ``records`` input records are available, counted
   across all workers (workers report them with ``received``);
3. ``timer`` — at least one record is available and ``timer_ms`` passed since
   the first one was reported;
4. ``tick`` — ``tick_ms`` passed since the previous step, even with no records;
5. ``checkpoint`` — the checkpoint interval passed (steps give checkpoints a
   boundary to happen at).

The clock is injected (seconds, monotonic), so tests drive time explicitly.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Reason(str, enum.Enum):
    REPLAY = "replay"
    RECORDS = "records"
    TIMER = "timer"
    TICK = "tick"
    CHECKPOINT = "checkpoint"
    WATERMARK = "watermark"        # no new records, but the watermark moved (a channel went idle): windows close
    END_OF_INPUT = "end-of-input"  # every source ended: one last step makes every window final


@dataclass
class StepTrigger:
    records: int = 1
    timer_ms: int = 100
    tick_ms: int = 0
    checkpoint_ms: int = 0

    def __post_init__(self) -> None:
        self._available = 0
        self._first_record_at: float | None = None
        self._last_step_at = 0.0
        self._last_checkpoint_at = 0.0
        self._replay = False

    def start(self, now: float) -> None:
        self._last_step_at = now
        self._last_checkpoint_at = now

    def received(self, available: int, now: float) -> None:
        """Total records available for the next step (replaces the previous count)."""
        if available > 0 and self._first_record_at is None:
            self._first_record_at = now
        if available == 0:
            self._first_record_at = None
        self._available = available

    def replay(self, pending: bool) -> None:
        self._replay = pending

    def checkpointed(self, now: float) -> None:
        self._last_checkpoint_at = now

    def stepped(self, now: float) -> None:
        """A step was triggered: counts start over."""
        self._available = 0
        self._first_record_at = None
        self._last_step_at = now
        self._replay = False

    def idle_for(self, now: float, ms: int) -> bool:
        """Has no step been triggered for ``ms``?"""
        return (now - self._last_step_at) * 1000 >= ms

    def due(self, now: float) -> Reason | None:
        if self._replay:
            return Reason.REPLAY
        if self._available >= self.records:
            return Reason.RECORDS
        if self._first_record_at is not None and (now - self._first_record_at) * 1000 >= self.timer_ms:
            return Reason.TIMER
        if self.tick_ms and (now - self._last_step_at) * 1000 >= self.tick_ms:
            return Reason.TICK
        if self.checkpoint_ms and (now - self._last_checkpoint_at) * 1000 >= self.checkpoint_ms:
            return Reason.CHECKPOINT
        return None
