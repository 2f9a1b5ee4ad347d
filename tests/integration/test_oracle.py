"""The oracle itself, on a pipeline small enough to compute by hand."""

from __future__ import annotations

from pathlib import Path

from ftpipeline.oracle import expected_outputs
from ftpipeline.spec import parse_pipeline

MODULE = '''
import pyarrow as pa
from pyspark.sql import functions as F

def gen(ctx):
    # channel 0 emits key "a" with value = offset, channel 1 emits "b"; 2 rows per step
    keys = ["a" if ctx.channel == 0 else "b"] * ctx.rows
    values = list(range(ctx.offset, ctx.offset + ctx.rows))
    return pa.table({"k": keys, "v": values})

def double(df):
    return df.withColumn("v2", F.col("v") * 2)
'''

PIPELINE = """
apiVersion: ftpipeline.io/v1alpha1
kind: FTPipeline
metadata: {name: tiny}
spec:
  image: x
  entryPoint: tiny.py
  workers: 1
  stages:
    - {name: src, parallelism: 2, source: {generator: {function: gen, rowsPerStep: 4}}}
    - {name: dbl, parallelism: 2, inputs: [{stage: src}], transform: {function: double}}
    - name: agg
      parallelism: 2
      inputs: [{stage: dbl}]
      aggregate:
        keyBy: [k]
        aggregations: [{name: n, op: count}, {name: s, op: sum, column: v2}, {name: lo, op: min, column: v}]
    - {name: out, parallelism: 2, inputs: [{stage: agg}], sink: {parquet: {path: out}}}
"""


def test_oracle_matches_a_hand_computed_changelog(tmp_path: Path, spark: object) -> None:
    (tmp_path / "tiny.py").write_text(MODULE)
    spec = parse_pipeline(PIPELINE, tmp_path)
    [df] = expected_outputs(spark, spec, 3).values()
    got = sorted(tuple(r) for r in df.select("step", "k", "n", "s", "lo").collect())
    # per channel and step: rows at offsets 2(step-1) and 2(step-1)+1, v2 = 2v
    # step 1: a: v 0,1 -> n 2, s 2, lo 0;  b: same offsets
    # step 2: a: v 2,3 -> running n 4, s 2+10=12, lo 0
    # step 3: a: v 4,5 -> running n 6, s 12+18=30, lo 0
    expected = sorted([(1, "a", 2, 2, 0), (1, "b", 2, 2, 0), (2, "a", 4, 12, 0), (2, "b", 4, 12, 0),
                       (3, "a", 6, 30, 0), (3, "b", 6, 30, 0)])
    assert got == expected
