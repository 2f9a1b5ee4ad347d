"""The rows of ``bench/state.py``: fill a keyed state to N keys, then touch a skewed few per step.

Steps ``1..fill_steps`` each bring ``fill`` new keys (so the state holds N
keys after them); every later step brings ``touched`` rows whose keys are a
Zipf draw over the N keys and 2 % more (some hot, most of the tail cold;
about one in fifty rows a new key). A channel takes the keys congruent to
it, so channels never share a key.

``make`` returns the generator function a pipeline's ``source.generator``
names; ``bench/state.py`` writes a two-line entry point that calls it with
the run's sizes, and calls the same function to write Spark's input files.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa


def fill_steps(keys: int, fill: int) -> int:
    return -(-keys // fill)


def make(keys: int, fill: int, touched: int, parallelism: int) -> Callable[[Any], pa.Table]:
    steps = fill_steps(keys, fill)
    space = int(keys * 1.02)

    def state_rows(ctx: Any) -> pa.Table:
        if ctx.step <= steps:
            lo = (ctx.step - 1) * fill
            ids = np.arange(lo - lo % parallelism + ctx.channel, min(keys, lo + fill), parallelism)
            ids = ids[ids >= lo]
        else:
            share = touched // parallelism
            ranks = ctx.rng.zipf(1.2, share)
            ids = (ranks * 2654435761) % space  # hot keys spread over the space, not the lowest ids
            ids = ids - ids % parallelism + ctx.channel
        return pa.table({"user": pa.array([f"user-{i:010d}" for i in ids.tolist()], pa.string()),
                         "amount": pa.array(ids % 1000, pa.int64())})
    return state_rows
