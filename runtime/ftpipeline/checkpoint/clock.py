"""Vector clocks with a checkpoint component: which messages belong to which checkpoint.

From the asynchronous-checkpoint notes: a vector timestamp has one component
per worker plus one more, the *checkpoint epoch*, which only the coordinator
increments. Every object (message) carries its producer's clock; a worker
merges the clocks of the inputs it consumes. So an object is "from the
future" of checkpoint e exactly when its epoch is >= e, and epoch e flows
along every causal path from the coordinator's decision, without any global
pause:

- a worker takes its checkpoint *before* consuming its first input of a
  newer epoch (so nothing of the new epoch is in its snapshot);
- inputs of the older epoch that it consumes *after* that are in-flight
  messages and are saved with the checkpoint;
- everything it produces after its checkpoint carries the new epoch, so a
  consumer downstream never folds post-checkpoint work into its own snapshot.

Workers are keyed by id rather than by position, because replacements join.
The coordinator's "messages" are the source tasks it dispatches: they carry
the epoch in which they were triggered.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class VectorClock:
    counts: Mapping[str, int] = field(default_factory=dict)
    epoch: int = 0

    def __post_init__(self) -> None:
        # a zero component is the same as an absent one; keep one representation
        if any(v == 0 for v in self.counts.values()):
            object.__setattr__(self, "counts", {k: v for k, v in self.counts.items() if v})

    def tick(self, worker: str) -> VectorClock:
        return VectorClock({**self.counts, worker: self.counts.get(worker, 0) + 1}, self.epoch)

    def merge(self, other: VectorClock) -> VectorClock:
        keys = set(self.counts) | set(other.counts)
        return VectorClock({k: max(self.counts.get(k, 0), other.counts.get(k, 0)) for k in keys},
                           max(self.epoch, other.epoch))

    def with_epoch(self, epoch: int) -> VectorClock:
        return VectorClock(dict(self.counts), max(self.epoch, epoch))

    def __le__(self, other: VectorClock) -> bool:
        """Happened before or equal (component-wise <=, epoch included)."""
        return self.epoch <= other.epoch and all(v <= other.counts.get(k, 0) for k, v in self.counts.items())

    def __lt__(self, other: VectorClock) -> bool:
        return self <= other and self != other

    def concurrent(self, other: VectorClock) -> bool:
        return not (self <= other) and not (other <= self)

    def encode(self) -> str:
        return json.dumps({"e": self.epoch, "c": dict(sorted(self.counts.items()))}, separators=(",", ":"))

    @classmethod
    def decode(cls, text: str | bytes | None) -> VectorClock:
        if not text:
            return cls()
        doc = json.loads(text)
        return cls({str(k): int(v) for k, v in doc["c"].items()}, int(doc["e"]))
