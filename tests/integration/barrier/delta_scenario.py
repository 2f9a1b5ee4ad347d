"""The Delta barrier driven by a real Spark with delta-spark, in a process of its own (a Spark session's class
path is fixed when its JVM starts, and the test process may have started one without Delta).

    python -m tests.integration.barrier.delta_scenario WORK_DIR   -> one JSON object of what it saw
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa


def main(work: Path) -> dict[str, Any]:
    from ftpipeline.barrier.delta import DeltaBarrier, DeltaReleaseError, StepWrite, spark_settings, write_step
    from ftpipeline.spec.model import DeltaSink, PipelineSpec
    from ftpipeline.worker.session import build_session

    spark = build_session("local[1]", spark_settings({}, delta=True), work / "spark", "delta-barrier-test")
    spec = PipelineSpec(name="orders", image=None, entry_point="orders.py", workers=1, stages=(), base_dir=work)
    table = work / "table"
    writes: list[StepWrite] = []

    def write(step_write: StepWrite) -> None:
        writes.append(step_write)
        write_step(spark, step_write)

    barrier = DeltaBarrier("table", DeltaSink(table), spec, write)
    seen: dict[str, Any] = {"gt_before": barrier.gt_last()}
    def stage(step: int) -> None:
        for channel in (0, 1):
            rows = pa.table({"k": [f"s{step}c{channel}r{i}" for i in range(3)], "v": [step * 10 + channel] * 3})
            barrier.stage_batches(step, channel, rows.schema, [rows])

    stage(1)
    stage(2)
    try:
        barrier.release(2, 2)
        seen["out_of_order"] = "released"
    except DeltaReleaseError as exc:
        seen["out_of_order"] = str(exc)
    seen["first"] = barrier.release(1, 2)
    seen["again"] = barrier.release(1, 2)  # a replay: the table holds it
    seen["second"] = barrier.release(2, 2)
    seen["gt_after"] = barrier.gt_last()
    seen["staging_left"] = sorted(p.name for p in barrier.staging.iterdir()) if barrier.staging.exists() else []
    version = spark.read.format("delta").load(str(table))  # plain Spark, as a user reads it afterwards
    seen["rows"] = version.count()
    seen["versions_before_late_write"] = spark.sql(f"DESCRIBE HISTORY delta.`{table}`").count()
    stage(1)  # staged again, as a rollback's replay does; then a fenced worker's late write of it
    write_step(spark, writes[0])
    seen["rows_after_late_write"] = spark.read.format("delta").load(str(table)).count()
    return seen


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1]))))
