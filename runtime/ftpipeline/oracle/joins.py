"""The oracle of an interval join (``operators/join.py``), as plain PySpark over both inputs whole.

With each row's step and that step's recorded watermark W:

- a row with a null key or event time is a dead letter, one behind W is
  late (the expected late-data output, with the input it came from);
- every pair of the other rows with equal keys and the right's event time
  minus the left's within [lower, upper] is a row of the output, in the
  later of the two rows' steps (a non-equi join of the two inputs), early
  downstream when the later row was (``eventtime/order.py``);
- a row of an outer side that is in no pair is a row of the output with
  nulls for the other side, in the first step, from its own on, whose
  watermark is above its expiry (left: its time plus upper; right: its time
  minus lower), early downstream (the advance released it; a row after its
  step's advance already past its expiry leaves with the others after it);
  none such in the run: not emitted.

A row that came before its step's advance is judged against the watermark
before it (``windows.marked``).

None of the runtime's buffering, state or expiry is used.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ftpipeline.oracle.files import STEP, Letter
from ftpipeline.oracle.windows import EARLY, TS, WM, marked, phase, placed
from ftpipeline.spec.model import StageSpec

ID, PHASE = "_id", "_phase"


def joined(spark: Any, left: Any, right: Any, stage: StageSpec, marks: Mapping[int, int | None],
           letters: list[Letter]) -> tuple[Any, Any]:
    """(the stage's expected output with a ``STEP`` column, its expected late rows with one)."""
    from pyspark.sql import functions as F

    op = stage.join
    assert op is not None
    keys = list(op.keys)
    sides = []
    late = None
    for df, column, name in ((left, op.left_time, op.left), (right, op.right_time, op.right)):
        df, steps = marked(spark, placed(df, keys, column, stage.name, letters), marks)
        is_late = F.col(WM).isNotNull() & (F.col(TS) < F.col(WM))
        behind = df.filter(is_late).drop(TS, EARLY).withColumn("late_watermark", F.timestamp_micros(F.col(WM))) \
            .drop(WM).withColumn("late_input", F.lit(name))
        late = behind if late is None else late.unionByName(behind, allowMissingColumns=True)
        sides.append(df.filter(~is_late).drop(WM).withColumn(ID, F.monotonically_increasing_id())
                     .withColumn(PHASE, phase(STEP, F.col(EARLY))).drop(EARLY))
    others = [[c for c in df.columns if c not in (*keys, TS, STEP, ID, PHASE)] for df in sides]
    both = set(others[0]) & set(others[1])
    names = [{c: (f"{side}_{c}" if c in both else c) for c in cols} for side, cols in zip(("left", "right"), others)]
    a, b = (df.select(*[F.col(c).alias(f"{p}{c}") for c in df.columns]) for p, df in zip(("a__", "b__"), sides))
    gap = F.col(f"b__{TS}") - F.col(f"a__{TS}")
    on = [F.col(f"a__{k}") == F.col(f"b__{k}") for k in keys]
    cond = on[0]
    for c in on[1:]:
        cond = cond & c
    pairs = a.join(b, cond & (gap >= op.lower_us) & (gap <= op.upper_us))
    columns = [F.col(f"a__{k}").alias(k) for k in keys]
    columns += [F.col(f"a__{c}").alias(n) for c, n in names[0].items()]
    columns += [F.col(f"b__{c}").alias(n) for c, n in names[1].items()]
    made = F.greatest(F.col(f"a__{PHASE}"), F.col(f"b__{PHASE}"))  # a pair comes with the later of its two rows
    out = pairs.select(*columns, (made / 2).cast("int").alias(STEP), (made % 2 == 0).alias(EARLY))
    types = {f.name: f.dataType for f in out.schema.fields}
    for side, prefix, bound in ((0, "a__", op.upper_us), (1, "b__", -op.lower_us)):
        if op.kind not in ("full", ("left", "right")[side]):
            continue
        alone = sides[side].join(pairs.select(F.col(f"{prefix}{ID}").alias(ID)), ID, "left_anti")
        fired = steps.filter(F.col(WM).isNotNull()).withColumnRenamed(STEP, "_s")
        leaves = alone.join(F.broadcast(fired), (F.col("_s") >= F.col(STEP)) & (F.col(WM) > F.col(TS) + bound)) \
            .groupBy(ID).agg(F.min("_s").alias("_leaves"))
        alone = alone.join(leaves, ID)
        mine = names[side]
        row = [F.col(k) for k in keys]
        for n, kind in types.items():
            if n in keys or n in (STEP, EARLY):
                continue
            source = next((c for c, m in mine.items() if m == n), None)
            row.append(F.col(source).alias(n) if source is not None else F.lit(None).cast(kind).alias(n))
        # released by the advance (early downstream), but for a row after its step's advance that was already
        # past its expiry: it never waited, and leaves with the rows after the advance
        passed = (F.col("_leaves") == F.col(STEP)) & (F.col(PHASE) % 2 == 1)
        out = out.unionByName(alone.select(*row, F.col("_leaves").alias(STEP), (~passed).alias(EARLY)))
    return out, late
