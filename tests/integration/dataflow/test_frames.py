"""Arrow into Spark without losing rows: the rebuild of chaos schedule 70 of seed 0.

Its rebuild of a two-input aggregate (one input adds a column) read 24 objects
of 700 rows, one of them empty in the middle; PySpark dropped every batch
after the empty one and the state lacked 385 rows.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ftpipeline.dataflow.frames import to_dataframe
from ftpipeline.lineage.naming import Channel, Task, TaskKind
from ftpipeline.spec.load import parse_pipeline
from ftpipeline.worker.buffer import WHOLE, ObjectBuffer, write_ipc
from ftpipeline.worker.executor import TaskRunner

PIPELINE = """
apiVersion: ftpipeline.io/v1alpha1
kind: FTPipeline
metadata: {name: frames}
spec:
  image: x
  entryPoint: fns.py
  workers: 1
  stages:
    - {name: orders, source: {generator: {function: orders, rowsPerStep: 10}}}
    - {name: enrich, inputs: [{stage: orders}], transform: {function: same}}
    - {name: tag, inputs: [{stage: orders}], transform: {function: same}}
    - name: per-user
      inputs: [{stage: enrich, partition: hash, keys: [user_id]}, {stage: tag, partition: hash, keys: [user_id]}]
      aggregate: {keyBy: [user_id], aggregations: [{name: orders, op: count}, {name: total, op: sum, column: amount}]}
    - {name: totals, inputs: [{stage: per-user}], sink: {parquet: {path: out}}}
"""


def _batches(*sizes: int) -> pa.Table:
    schema = pa.schema([("x", pa.int64())])
    return pa.Table.from_batches([pa.record_batch([pa.array(range(n), pa.int64())], schema=schema) for n in sizes], schema=schema)


def test_every_batch_reaches_spark_also_after_an_empty_one(spark: Any) -> None:
    for sizes in [(3, 0, 3), (0, 3, 3), (3, 3, 0), (0,), (), (5, 0, 0, 2, 0, 1)]:
        table = _batches(*sizes)
        assert to_dataframe(spark, table).count() == sum(sizes), sizes


def test_a_rebuild_folds_every_row_of_inputs_that_include_an_empty_object(spark: Any, tmp_path: Path) -> None:
    (tmp_path / "fns.py").write_text("def orders(*args):\n    return None\n\n\ndef same(df):\n    return df\n")
    spec = parse_pipeline(PIPELINE, tmp_path)
    runner = TaskRunner(spark, spec, module=None, buffer=ObjectBuffer(tmp_path / "buffer"))

    def rows(step: int, n: int, tagged: bool) -> pa.Table:
        cols: dict[str, Any] = {"user_id": [f"u{i % 3}" for i in range(n)], "amount": [float(step)] * n}
        if tagged:
            cols["big"] = [step % 2 == 0] * n
        schema = pa.schema([("user_id", pa.string()), ("amount", pa.float64())] + ([("big", pa.bool_())] if tagged else []))
        return pa.table(cols, schema=schema)

    inputs = []
    for edge, tagged in (("enrich", False), ("tag", True)):
        for step in range(1, 5):
            n = 0 if step == 2 else 6  # step 2 of each edge produced nothing for this channel
            path = tmp_path / f"{edge}.0.{step}.per-user.1.0.arrow"
            write_ipc(path, rows(step, n, tagged))
            inputs.append([path.stem, str(path), WHOLE])
    rebuild = Task(TaskKind.REBUILD, "per-user", 0, 4, first=1)

    result = runner.run(rebuild, inputs)

    assert result["rows_in"] == 36
    held = runner.keyed.states[Channel("per-user", 0)]
    assert held is not None
    state = pa.Table.from_batches(list(held.scan()), schema=held.schema)
    assert pc.sum(state["orders"]).as_py() == 36  # 315 of 700 in the failed run: the rows after the empty object were lost
    assert sorted(state["total"].to_pylist()) == [32.0, 32.0, 32.0]  # per user: 2 rows × (1 + 3 + 4) on each of 2 edges
