"""A worker's part in asynchronous checkpoints: its vector clock and message counts.

The sidecar calls :meth:`EpochKeeper.consume` when it hands a task to the
Spark process (consuming = receiving the task's input messages) and
:meth:`EpochKeeper.produce` when the task's outputs are recorded (sending).
From the clocks of the inputs it decides, per the algorithm in
``checkpoint.clock``:

- *checkpoint first*: an input is of a newer epoch than the worker, so the
  worker's stateful channels are snapshotted before this task runs, and its
  deficit — messages of older epochs it sent minus those it received, so
  far — is reported to the coordinator;
- *in flight*: an input is of an older epoch than the worker (it crossed the
  cut): it is saved with the checkpoint and reported, which settles one unit
  of deficit.

Work re-run for recovery is not messaging: its inputs and outputs are
neither counted nor checkpoint triggers (a checkpoint in progress is aborted
on any loss, and the coordinator settles the counts before the next one).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ftpipeline.checkpoint.clock import VectorClock


@dataclass(frozen=True)
class Consumption:
    checkpoint: int | None        # take the checkpoint of this epoch before running the task
    deficit: int                  # reported with that checkpoint
    inflight: tuple[int, ...]     # indexes of inputs that crossed the cut


@dataclass
class EpochKeeper:
    worker: str
    clock: VectorClock = field(default_factory=VectorClock)
    counts: dict[int, list[int]] = field(default_factory=dict)   # epoch -> [sent, received]

    def _deficit_before(self, epoch: int) -> int:
        return sum(sent - received for e, (sent, received) in self.counts.items() if e < epoch)

    def consume(self, inputs: Sequence[VectorClock], source_epoch: int | None = None) -> Consumption:
        """Inputs of a task about to run; ``source_epoch`` for source tasks (the coordinator's message)."""
        newest = max([c.epoch for c in inputs] + ([source_epoch] if source_epoch is not None else []), default=0)
        checkpoint = None
        deficit = 0
        if newest > self.clock.epoch:
            deficit = self._deficit_before(newest)
            self.clock = self.clock.with_epoch(newest)
            checkpoint = newest
        inflight = tuple(i for i, c in enumerate(inputs) if c.epoch < self.clock.epoch)
        for c in inputs:
            self.counts.setdefault(c.epoch, [0, 0])[1] += 1
            self.clock = self.clock.merge(c)
        return Consumption(checkpoint, deficit, inflight)

    def produce(self, n: int) -> VectorClock:
        """Clock to stamp on a completed task's ``n`` outputs."""
        self.clock = self.clock.tick(self.worker)
        self.counts.setdefault(self.clock.epoch, [0, 0])[0] += n
        return self.clock

    def checkpoint_now(self, epoch: int) -> int | None:
        """The coordinator announced ``epoch`` to a worker that will receive no message of it."""
        if epoch <= self.clock.epoch:
            return None
        deficit = self._deficit_before(epoch)
        self.clock = self.clock.with_epoch(epoch)
        return deficit

    def settle(self, epoch: int) -> None:
        """Every message of epochs before ``epoch`` was consumed (drained): forget their counts."""
        self.counts = {e: c for e, c in self.counts.items() if e >= epoch}

    def reset(self, epoch: int) -> None:
        """Reopened at a checkpoint: no message of the past is in flight any more."""
        self.clock = VectorClock(epoch=epoch)
        self.counts = {}
