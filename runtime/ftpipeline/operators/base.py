"""The contract between the executor and a keyed stateful operator (``operators/__init__.py``).

An operator with event time is called twice in a step whose input holds rows that came before the
watermark's advance (``eventtime/order.py``): with those, ``ctx.advance`` False and the watermark before;
then with the rest and the step's watermark. What its advance emits (windows fired, sessions closed, an outer
join's rows released, timers' output) it returns as ``Emitted.fired``, apart from ``Emitted.rows``."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

import pyarrow as pa

from ftpipeline.dataflow.sources.base import DeadLetter
from ftpipeline.state.backend import KeyedState


@dataclass(frozen=True)
class StepContext:
    step: int
    watermark: int | None      # the step's recorded watermark, us (None: not known yet)
    emit: bool = True          # False in a rebuild: the state moves on, nothing is written
    where: str = ""            # the channel, for messages ("stage.channel")
    # the step's rows of each input stage, for an operator that reads them apart (``by_input``: a join)
    inputs: Mapping[str, pa.Table] = field(default_factory=dict)
    now: int | None = None     # the step's recorded processing time, us (a keyed function's clock)
    # False: these are the rows that came before the step's advance, ``watermark`` is the one before it and
    # nothing new may fire (``eventtime/order.py``; a second call takes the rest and advances)
    advance: bool = True
    first: bool = True         # the step's first call (False: the second, after the rows before the advance)


@dataclass
class Emitted:
    rows: pa.Table | None = None                       # what goes downstream (after the watermark's advance)
    fired: pa.Table | None = None                      # what the advance emitted: downstream takes it before
    dead: list[DeadLetter] = field(default_factory=list)
    late: pa.Table | None = None                       # records behind the watermark, with why
    evicted: int = 0                                   # rows the state let go this step


class Holder(Protocol):
    """A channel's state as an operator sees it: there, or created on first use with the operator's keys."""

    def get(self) -> KeyedState | None: ...

    def create(self, schema: pa.Schema) -> KeyedState: ...


class Operator(Protocol):
    keys: list[str]            # the state's key columns
    index: str | None          # the column its rows leave by (backend.KeyedState.expire)
    folds_at_once: bool        # a rebuild may fold all its steps' rows as one step (merging is associative)
    by_input: bool             # reads each input's rows apart (``ctx.inputs``), not their union (``table``)

    def process(self, state: Holder, table: pa.Table, ctx: StepContext) -> Emitted:
        """One step: ``table`` holds the step's rows (possibly none, never None; empty for ``by_input``)."""
        ...

    def evict(self, state: KeyedState, step: int) -> int:
        """What leaves the state before a checkpoint of it at ``step`` (a TTL's expired keys); how many."""
        ...


Factory = Callable[[], Operator]
