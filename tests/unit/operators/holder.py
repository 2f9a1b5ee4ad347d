"""A channel's state for an operator under test: created on first use, on the backend given."""

from __future__ import annotations

import pyarrow as pa

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
