"""Deterministic generated input: the same offsets always give the same rows.

A generator stage calls a user function with a :class:`GeneratorContext`
whose random generator is seeded from ``(seed, channel, first offset)``. The
rows of a step therefore depend only on what the coordinator recorded for it,
never on which worker runs it or how often: a replay after a lost worker, or
the oracle's batch run, sees exactly the rows the first run saw.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np
import pyarrow as pa

from ftpipeline.dataflow.sources.base import OneSlotPerChannel, SourceBatch
from ftpipeline.spec.model import GeneratorSource


@dataclass(frozen=True)
class GeneratorContext:
    step: int
    channel: int
    offset: int          # number of the first row in this channel's stream
    rows: int            # how many rows to return
    seed: int
    rng: np.random.Generator


class GeneratorReader(OneSlotPerChannel):
    def __init__(self, spec: GeneratorSource, module: ModuleType | None) -> None:
        self.spec = spec
        self._module = module

    def _function(self) -> Callable[[GeneratorContext], Any]:
        if self._module is None:
            raise RuntimeError("generator read without the entry point module")
        fn: Callable[[GeneratorContext], Any] = getattr(self._module, self.spec.function)
        return fn

    def available(self, channel: int, start: int) -> int | None:
        return None

    def exhausted(self, channel: int, start: int) -> bool:
        return False

    def read(self, channel: int, step: int, lo: int, hi: int) -> SourceBatch:
        rng = np.random.default_rng([self.spec.seed, channel, lo])
        ctx = GeneratorContext(step, channel, lo, hi - lo, self.spec.seed, rng)
        out = self._function()(ctx)
        if isinstance(out, pa.RecordBatch):
            out = pa.Table.from_batches([out])
        elif isinstance(out, dict):
            out = pa.table(out)
        if not isinstance(out, pa.Table):
            raise TypeError(f"generator {self.spec.function!r} returned {type(out).__name__}, expected a pyarrow.Table")
        return SourceBatch(out)
