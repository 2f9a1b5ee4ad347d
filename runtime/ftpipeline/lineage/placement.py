"""Which worker runs which channel: start, adoption after a loss, hand-back on join.

Three rules, all deterministic so every caller computes the same map:

- *Start*: channel ``i`` of every stage goes to worker ``i mod W``. Channels
  joined by a forward edge land on the same worker, so forward edges never
  cross the network.
- *Adoption* (a worker is lost): its channels are spread over the survivors,
  stateful channels first, each to the survivor owning the fewest channels.
  Survivors have warm Spark sessions, so recovery never waits for a JVM, and
  the lost work is divided among them.
- *Hand-back* (a replacement joins): stateless channels move to the newcomer
  from the most loaded workers until loads differ by at most one. Stateful
  channels stay where their state lives; moving them would mean moving state.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence

from ftpipeline.lineage.naming import Channel, WorkerId

Placement = dict[Channel, WorkerId]


def initial_placement(channels: Iterable[Channel], workers: Sequence[WorkerId]) -> Placement:
    if not workers:
        raise ValueError("no workers to place channels on")
    return {ch: workers[ch.index % len(workers)] for ch in sorted(channels)}


def _loads(placement: Mapping[Channel, WorkerId], workers: Iterable[WorkerId]) -> Counter[WorkerId]:
    loads: Counter[WorkerId] = Counter(dict.fromkeys(workers, 0))
    for worker in placement.values():
        if worker in loads:
            loads[worker] += 1
    return loads


def adopt(
    placement: Mapping[Channel, WorkerId],
    dead: WorkerId,
    alive: Sequence[WorkerId],
    is_stateful: Callable[[str], bool],
) -> tuple[Placement, dict[Channel, WorkerId]]:
    """Move the dead worker's channels to survivors; return (new placement, moves)."""
    if not alive:
        raise ValueError(f"worker {dead} was lost and no worker survives")
    out = dict(placement)
    orphans = sorted((ch for ch, w in placement.items() if w == dead), key=lambda c: (not is_stateful(c.stage), c))
    loads = _loads({c: w for c, w in placement.items() if w != dead}, alive)
    moves: dict[Channel, WorkerId] = {}
    for ch in orphans:
        target = min(sorted(alive), key=lambda w: loads[w])
        out[ch] = moves[ch] = target
        loads[target] += 1
    return out, moves


def hand_back(
    placement: Mapping[Channel, WorkerId],
    newcomer: WorkerId,
    workers: Sequence[WorkerId],
    is_stateful: Callable[[str], bool],
) -> tuple[Placement, dict[Channel, WorkerId]]:
    """Give stateless channels to a newly joined worker until loads are even."""
    out = dict(placement)
    loads = _loads(out, [*workers, newcomer])
    moves: dict[Channel, WorkerId] = {}
    while True:
        donor = max(sorted(w for w in loads if w != newcomer), key=lambda w: loads[w], default=None)
        if donor is None or loads[donor] - loads[newcomer] <= 1:
            break
        movable = sorted(ch for ch, w in out.items() if w == donor and not is_stateful(ch.stage))
        if not movable:
            loads[donor] = -1  # nothing to take from this one; try the next
            continue
        ch = movable[-1]
        out[ch] = moves[ch] = newcomer
        loads[donor] -= 1
        loads[newcomer] += 1
    return out, moves
