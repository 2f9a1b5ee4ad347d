"""The oracle of a deduplication (``operators/dedup.py``), as plain PySpark over the whole input.

With each row's step and the watermark W it is judged against (its step's; for a row that came before the
step's advance, the one before: ``windows.marked``):

- a row whose event time is behind W is late (the expected late-data output);
- of a key's on-time rows in one step, the candidate is the first by event
  time, then by the other columns in name order (a window function);
- a key's candidates, in step order, pass or not by one fold over them
  (Spark's ``aggregate`` higher-order function): a candidate passes unless
  the last one that passed expires after W (its event time plus ``within``),
  and one that passes is what the next is checked against.

None of the runtime's sorting, state or expiry is used.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ftpipeline.oracle.files import STEP, Letter
from ftpipeline.oracle.windows import EARLY, TS, WM, marked, phase, placed
from ftpipeline.spec.model import StageSpec

RID = "_rid"
SORTABLE = ("string", "binary", "boolean", "byte", "short", "integer", "long", "float", "double", "date",
            "timestamp", "timestamp_ntz", "decimal")


def deduplicated(spark: Any, df: Any, stage: StageSpec, marks: Mapping[int, int | None],
                 letters: list[Letter]) -> tuple[Any, Any]:
    """(the stage's expected output with a ``STEP`` column, its expected late rows with one)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    op = stage.deduplicate
    assert op is not None
    df, _ = marked(spark, placed(df, op.keys, op.time_column, stage.name, letters), marks)
    originals = [c for c in df.columns if c not in (TS, WM)]
    is_late = F.col(WM).isNotNull() & (F.col(TS) < F.col(WM))
    late = df.filter(is_late).select(*[c for c in originals if c != EARLY],
                                     F.timestamp_micros(F.col(WM)).alias("late_watermark"))
    others = sorted(f.name for f in df.schema.fields
                    if f.name not in (*op.keys, TS, WM, STEP, EARLY) and f.dataType.typeName() in SORTABLE)
    # a step's rows before its advance are a call of their own (eventtime/order.py): a candidate each
    df = df.withColumn("_phase", phase(STEP, F.col(EARLY)))
    ranked = Window.partitionBy(*op.keys, "_phase").orderBy(F.col(TS).asc_nulls_last(),
                                                            *[F.col(c).asc_nulls_last() for c in others])
    candidates = df.filter(~is_late).withColumn("_n", F.row_number().over(ranked)).filter(F.col("_n") == 1) \
        .drop("_n").withColumn(RID, F.monotonically_increasing_id())
    seen = candidates.groupBy(*op.keys).agg(F.array_sort(F.collect_list(
        F.struct(F.col("_phase").alias("s"), F.col(TS).alias("t"), F.col(WM).alias("w"),
                 F.col(RID).alias("r")))).alias("xs"))
    start = F.struct(F.lit(None).cast("long").alias("exp"), F.array().cast("array<long>").alias("out"))

    def fold(acc: Any, x: Any) -> Any:
        alive = acc["exp"].isNotNull() & (x["w"].isNull() | (acc["exp"] > x["w"]))
        passed = F.struct((x["t"] + op.within_us).alias("exp"), F.concat(acc["out"], F.array(x["r"])).alias("out"))
        return F.when(alive, acc).otherwise(passed)

    passed = seen.select(F.explode(F.aggregate("xs", start, fold).getField("out")).alias(RID))
    out = candidates.join(passed, RID, "left_semi").select(*originals)
    return out, late
