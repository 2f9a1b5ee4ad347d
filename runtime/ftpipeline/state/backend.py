"""The keyed state of a stateful channel, behind one protocol whatever holds it.

A running aggregate (and later windows and joins) reads and writes its
state only through :class:`KeyedState`: it asks for the rows of the keys a
step touches, folds the step into them and writes them back. What holds the
rows is a backend, chosen per pipeline (``state.backend`` in the spec), the
way Flink chooses a state backend and Spark Structured Streaming a state
store provider:

- ``rocksdb`` (``state.rocks``), the default: one embedded RocksDB per
  channel on the worker's local disk. A step costs in proportion to the keys
  it touches, state may exceed memory, and a checkpoint uploads only the
  table files written since the previous one.
- ``memory`` (``state.memory``): one Arrow table in the Spark process; a
  step costs in proportion to the whole state. For tiny state and tests.

``bench/state_backends.py`` measured the candidates side by side (RocksDB,
DuckDB's upserts, the Arrow table); its output is why RocksDB is the default.

A state's life::

    open (empty, or restored from a snapshot path) -> get/put/delete per step
      -> freeze (at a checkpoint: cheap, on the task path) -> write (in the
         background: the snapshot in checkpoint storage) -> ... -> close

Each row carries the step that last updated it (:data:`STEP`): the state's
TTL reads it, and eviction removes the rows it finds expired. A state may be
*indexed* by one integer column (``index``): the step for a TTL, the time a
window fires for a window's state (``operators/window.py``, Flink's timers).
``expire`` then takes the rows below a bound in that column and costs what
it takes, not what the state holds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Protocol

import pyarrow as pa

from ftpipeline.checkpoint.storage import CheckpointStorage
from ftpipeline.checkpoint.tracker import ChannelSnapshot

STEP = "__ftp_step"  # the step that last updated a row

Writer = Callable[[], ChannelSnapshot]


class KeyedState(Protocol):
    """One stateful channel's rows, one per key."""

    schema: pa.Schema   # the key columns first, then the values, then STEP
    keys: list[str]

    def get(self, keys: pa.Table) -> pa.Table:
        """The rows of ``keys``, in their order; for a key not held, nulls (its key columns may hold the
        key or nulls)."""
        ...

    def put(self, rows: pa.Table) -> None:
        """Insert or replace the rows (of this schema) by key."""
        ...

    def delete(self, keys: pa.Table) -> None:
        ...

    def evict(self, before_step: int) -> int:
        """Delete the rows last updated before ``before_step``; answer how many."""
        ...

    def expire(self, before: int, since: int | None = None) -> pa.Table:
        """Delete and return the rows whose index column is below ``before`` (a state created with an index),
        and not below ``since`` when given (two kinds of row in one index, ``operators/process.py``)."""
        ...

    def scan(self) -> Iterator[pa.RecordBatch]:
        """Every row, in no particular order."""
        ...

    def count(self) -> int:
        ...

    def freeze(self, storage: CheckpointStorage, epoch: int, channel: str, step: int) -> Writer:
        """Capture the state as it is now (cheap: the caller's next step may change it at once);
        the returned writer saves that capture in ``storage`` and may run in another thread."""
        ...

    def close(self) -> None:
        """Release the state and whatever local files hold it."""
        ...


class StateBackend(Protocol):
    name: str

    def create(self, channel: str, schema: pa.Schema, keys: list[str], index: str | None = None) -> KeyedState:
        """An empty state; ``index``: the int64 column its rows leave by (``STEP`` for a TTL, a window's
        firing time), so a backend that can keeps an index that makes ``evict``/``expire`` cost what
        they remove."""
        ...

    def restore(self, channel: str, storage: CheckpointStorage, path: str, keys: list[str],
                step: int, index: str | None = None) -> KeyedState | None:
        """The state a snapshot in ``storage`` holds (None for an empty one, ``path == ""``);
        ``keys`` and ``step`` describe a snapshot written before its rows carried them."""
        ...


def make_backend(name: str, local_dir: Path) -> StateBackend:
    """The backend a spec names; ``local_dir`` is the worker's own disk (its buffer directory)."""
    if name == "memory":
        from ftpipeline.state.memory import MemoryBackend

        return MemoryBackend()
    if name == "rocksdb":
        from ftpipeline.state.rocks import RocksBackend

        return RocksBackend(local_dir / "state")
    raise ValueError(f"state.backend: unknown backend {name!r} (expected 'rocksdb' or 'memory')")
