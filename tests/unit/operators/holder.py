"""A channel's state for an operator under test: created on first use, on the backend given."""

from __future__ import annotations

import pyarrow as pa

from ftpipeline.operators.base import Emitted
from ftpipeline.state.backend import KeyedState, StateBackend


class Holder:
    def __init__(self, backend: StateBackend, keys: list[str], index: str | None) -> None:
        self.backend, self.keys, self.index = backend, keys, index
        self.state: KeyedState | None = None

    def get(self) -> KeyedState | None:
        return self.state

    def create(self, schema: pa.Schema) -> KeyedState:
        self.state = self.backend.create("op.0", schema, self.keys, self.index)
        return self.state


def output_of(out: Emitted) -> pa.Table:
    """Everything a step of an operator emitted, in its order: what its watermark's advance emitted (downstream
    takes it before the advance), then the rest."""
    parts = [t for t in (out.fired, out.rows) if t is not None]
    assert parts, "the step emitted nothing, not even an empty table"
    kept = [t for t in parts if t.num_rows] or parts[-1:]
    return kept[0] if len(kept) == 1 else pa.concat_tables(kept)
