"""Names of objects, channels and tasks: the vocabulary of the lineage tables.

An *object* is the output of one task for one downstream channel, named after
Quokka as ``(actor, channel, seq, target_actor, partition_fn, target_channel)``
where ``seq`` is the step. Because an object has exactly one producer task and
exactly one consumer task, "has its consumer finished with it" is a property of
the name alone, which is what lets the cemetery (``cemetery.py``) store
consumption as a set of sequence numbers per *edge*
``(actor, channel, target_actor, partition_fn, target_channel)``.

A *task* is ``(kind, stage, channel, step range)``, where the stage is a
stage of the physical pipeline: a chain of one-to-one stages counts as one,
named after its first (``dataflow/chains.py``). Ordinary tasks cover one
step. A ``rebuild`` task covers ``first..step`` and exists only in recovery: it
folds every kept input of a stateful channel into its state in one Spark job
rather than one job per lost step. ``emit`` restricts which outputs a
recovery task writes (only the ones somebody still needs); ``epoch`` keeps the
id of a re-run distinct from the run it replaces.

Stage names are DNS labels (no dots), so the dotted string forms below are
unambiguous and safe as Redis keys and file names.
"""

from __future__ import annotations

import enum
import json
import re
from dataclasses import dataclass, replace
from typing import Any, NewType

WorkerId = NewType("WorkerId", str)
StepNo = NewType("StepNo", int)

# The "worker" that holds objects saved in checkpoint storage (restores read them from there).
STORAGE_NODE = WorkerId("storage")


@dataclass(frozen=True, order=True)
class Channel:
    stage: str
    index: int

    def key(self) -> str:
        return f"{self.stage}.{self.index}"

    @classmethod
    def parse(cls, text: str) -> Channel:
        stage, index = text.rsplit(".", 1)
        return cls(stage, int(index))


# A source's unit of offsets, named like a channel (``stage.index``): a channel of a generator or a
# directory of files is its own one slot; a Kafka partition p is a slot of the channel p mod parallelism
# (a channel may read several partitions). The step log, the command log and checkpoint manifests keep
# offsets per slot; a source task reads the ranges of its channel's slots.
Slot = Channel

# (slot index, lo, hi): the offsets [lo, hi) of one slot that a source task reads
SlotRange = tuple[int, int, int]


def slot_channel(slot: int, parallelism: int) -> int:
    """The channel that reads ``slot``."""
    return slot % parallelism


@dataclass(frozen=True, order=True)
class EdgeKey:
    """The cemetery key: one producer channel feeding one consumer channel."""

    actor: str
    channel: int
    target: str
    partition_fn: int
    target_channel: int

    def key(self) -> str:
        return f"{self.actor}.{self.channel}.{self.target}.{self.partition_fn}.{self.target_channel}"

    @classmethod
    def parse(cls, text: str) -> EdgeKey:
        a, c, t, p, tc = text.split(".")
        return cls(a, int(c), t, int(p), int(tc))


_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")  # a stage name (spec/schema.py's NAME_PATTERN)
_NUMBER = re.compile(r"0|[1-9][0-9]{0,17}")


@dataclass(frozen=True, order=True)
class ObjectName:
    actor: str
    channel: int
    seq: int
    target: str
    partition_fn: int
    target_channel: int

    def key(self) -> str:
        return f"{self.actor}.{self.channel}.{self.seq}.{self.target}.{self.partition_fn}.{self.target_channel}"

    @classmethod
    def parse(cls, text: str) -> ObjectName:
        a, c, s, t, p, tc = text.split(".")
        return cls(a, int(c), int(s), t, int(p), int(tc))

    @classmethod
    def checked(cls, text: str) -> ObjectName:
        """``parse`` of a name that came from outside (a peer's request): refused with ValueError unless
        it is exactly a name this runtime makes, stage names as DNS labels, numbers in decimal, so it can
        never carry a path component."""
        parts = text.split(".")
        if (len(parts) != 6 or not all(_LABEL.fullmatch(parts[i]) for i in (0, 3))
                or not all(_NUMBER.fullmatch(parts[i]) for i in (1, 2, 4, 5))):
            raise ValueError(f"not an object name: {text[:120]!r}")
        return cls.parse(text)

    @property
    def edge(self) -> EdgeKey:
        return EdgeKey(self.actor, self.channel, self.target, self.partition_fn, self.target_channel)

    @property
    def producer(self) -> Channel:
        return Channel(self.actor, self.channel)

    @property
    def consumer(self) -> Channel:
        return Channel(self.target, self.target_channel)


class TaskKind(str, enum.Enum):
    SOURCE = "source"
    TRANSFORM = "transform"
    AGGREGATE = "aggregate"
    SINK = "sink"
    REBUILD = "rebuild"


@dataclass(frozen=True)
class Task:
    kind: TaskKind
    stage: str
    channel: int
    step: int
    first: int = -1
    ranges: tuple[SlotRange, ...] | None = None   # a source task's slots and offsets
    emit: frozenset[str] | None = None
    recovery: bool = False
    epoch: int = 0
    ckpt: int = 0                 # checkpoint epoch a source task was triggered in (vector clock)
    base: str | None = None       # rebuild: snapshot to start from (path in checkpoint storage)

    def __post_init__(self) -> None:
        if self.first < 0:
            object.__setattr__(self, "first", self.step)

    @property
    def ref(self) -> Channel:
        return Channel(self.stage, self.channel)

    @property
    def id(self) -> str:
        span = str(self.step) if self.first == self.step else f"{self.first}-{self.step}"
        return f"{self.kind.value}:{self.stage}.{self.channel}:{span}@{self.epoch}"

    @property
    def source_rows(self) -> int:
        """Offsets a source task reads (its records, less any gaps in a Kafka partition)."""
        return sum(hi - lo for _, lo, hi in self.ranges or ())

    @property
    def steps(self) -> range:
        return range(self.first, self.step + 1)

    def for_recovery(self, epoch: int, emit: frozenset[str] | None = None) -> Task:
        return replace(self, recovery=True, epoch=epoch, emit=emit)

    def to_json(self) -> str:
        doc: dict[str, Any] = {"k": self.kind.value, "s": self.stage, "c": self.channel, "n": self.step}
        if self.first != self.step:
            doc["f"] = self.first
        if self.ranges is not None:
            doc["o"] = [list(r) for r in self.ranges]
        if self.emit is not None:
            doc["e"] = sorted(self.emit)
        if self.recovery:
            doc["r"] = 1
        if self.epoch:
            doc["p"] = self.epoch
        if self.ckpt:
            doc["x"] = self.ckpt
        if self.base is not None:
            doc["b"] = self.base
        return json.dumps(doc, separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> Task:
        doc = json.loads(text)
        ranges = doc.get("o")
        emit = doc.get("e")
        return cls(
            kind=TaskKind(doc["k"]),
            stage=doc["s"],
            channel=doc["c"],
            step=doc["n"],
            first=doc.get("f", doc["n"]),
            ranges=tuple((r[0], r[1], r[2]) for r in ranges) if ranges is not None else None,
            emit=frozenset(emit) if emit is not None else None,
            recovery=bool(doc.get("r", 0)),
            epoch=doc.get("p", 0),
            ckpt=doc.get("x", 0),
            base=doc.get("b"),
        )


def store_user(store_key: str) -> str:
    """The user a pipeline is known by to the shared Redis and ZooKeeper (``control/access.py``,
    ``commandlog/zkaccess.py``): a digest of its store key, short and free of characters a URL or a
    ZooKeeper digest would need escaped."""
    import hashlib

    return "ftp-" + hashlib.sha256(store_key.encode()).hexdigest()[:24]
