"""The oracle's reading of a Delta table: the rows of steps 1..N, through delta-rs rather than delta-spark.

The run writes through delta-spark; the oracle reads the table with another
implementation of the Delta protocol (``deltalake``), as it would be read
by any other consumer, at the table version whose commit holds step N of
this pipeline's transaction (later steps are not part of the comparison).
A table's rows carry no step, so the comparison is of steps 1..N as one
multiset: each row once, none missing, none extra.
"""

from __future__ import annotations

import pyarrow as pa

from ftpipeline.barrier.delta import DeltaBarrier, version_of_step
from ftpipeline.spec.model import PipelineSpec, StageSpec


def released_table(spec: PipelineSpec, stage: StageSpec, steps: int) -> pa.Table | None:
    """The table's rows as of step ``steps`` (None: no table, or none of these steps in it)."""
    from deltalake import DeltaTable

    assert stage.delta_sink is not None
    app_id = DeltaBarrier(stage.name, stage.delta_sink, spec).app_id
    version = version_of_step(stage.delta_sink.path, app_id, steps)
    if version is None:
        return None
    return DeltaTable(str(stage.delta_sink.path), version=version).to_pyarrow_table()
