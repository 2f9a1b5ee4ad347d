"""Restoring a channel whose stage's parallelism changed since the checkpoint: its keys from every old snapshot.

Why here, in the Spark process: the rows a channel owns are those its
upstream hash edge sends it, and that edge routes by Spark's own Murmur3
``hash`` (``dataflow/partition.py``). Re-partitioning with anything else
would put a key in one channel while its next rows arrive at another. So
the keys of each old snapshot go through the same ``pmod(hash(keys), n)``
(``partition.channels_of``: numpy, or Spark for the key types only it
hashes), and the rows whose result is this channel's index are put into a
new state (``checkpoint/rescale.py`` says which snapshots and which n).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ftpipeline.checkpoint.rescale import Rescaled
from ftpipeline.checkpoint.storage import CheckpointStorage
from ftpipeline.dataflow.partition import channels_of
from ftpipeline.lineage.naming import Channel
from ftpipeline.state.backend import KeyedState, StateBackend
from ftpipeline.state.snapshots import read_rows

def restore_rescaled(spark: Any, backend: StateBackend, storage: CheckpointStorage, channel: Channel,
                     rescaled: Rescaled, keys: list[str], step: int, index: str | None) -> KeyedState | None:
    """The state of ``channel`` at ``step``: the rows of every old snapshot whose keys its input edges send it,
    hashed on the edges' own columns in their order (``rescaled.keys``); None when there are none. ``keys``:
    the state's key columns."""
    state: KeyedState | None = None
    for path in rescaled.sources:
        schema, key_columns, batches = read_rows(storage, path, keys, step)
        for batch in batches:
            if not batch.num_rows:
                continue
            table = pa.Table.from_batches([batch], schema=schema)
            routed = channels_of(spark, table, rescaled.keys, rescaled.parallelism)
            mine = table.filter(pc.equal(routed, channel.index))
            if mine.num_rows:
                if state is None:
                    state = backend.create(channel.key(), schema, key_columns, index)
                state.put(mine)
    return state
