"""The oracle itself, on a pipeline small enough to compute by hand."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute  # noqa: F401  (pa.compute)

from ftpipeline.oracle import compare, expected_outputs
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


FILES_MODULE = '''
from pyspark.sql import functions as F

def thirds(df):
    return df.withColumn("third", F.col("amount") / 3.0)
'''

FILES_PIPELINE = """
apiVersion: ftpipeline.io/v1alpha1
kind: FTPipeline
metadata: {name: thirds}
spec:
  image: x
  entryPoint: thirds.py
  workers: 1
  stages:
    - name: src
      parallelism: 1
      source: {file: {path: in, format: jsonl, rowsPerStep: 4, schema: {k: string, amount: double}}}
    - {name: t, parallelism: 1, inputs: [{stage: src}], transform: {function: thirds}}
    - name: agg
      parallelism: 1
      inputs: [{stage: t}]
      aggregate: {keyBy: [k], aggregations: [{name: total, op: sum, column: third}]}
    - {name: out, parallelism: 1, inputs: [{stage: agg}], sink: {parquet: {path: out}}}
"""


def _released(spark: Any, spec: Any, directory: Path, scale: float) -> None:
    """Write the oracle's own rows as a run would release them, every double scaled by ``scale``."""
    import pyarrow.parquet as pq

    [df] = expected_outputs(spark, spec, 3).values()
    table = df.toArrow()
    for step in (1, 2, 3):
        part = table.filter(pa.compute.equal(table["step"], step)).drop_columns(["step"])
        part = part.set_column(part.schema.get_field_index("total"), "total",
                               pa.compute.multiply(part["total"], scale))
        (directory / f"step={step}").mkdir(parents=True)
        pq.write_table(part, directory / f"step={step}" / "part-00000.parquet")


def test_verify_compares_doubles_within_a_relative_tolerance(tmp_path: Path, spark: Any) -> None:
    """A double sum whose last bits differ (another summation order) equals the oracle; one that is
    off by more than the tolerance does not."""
    (tmp_path / "thirds.py").write_text(FILES_MODULE)
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.jsonl").write_text("".join(
        json.dumps({"k": "ab"[i % 2], "amount": 0.1 * i + 1e7 * (i % 3)}) + "\n" for i in range(12)))
    spec = parse_pipeline(FILES_PIPELINE, tmp_path)
    _released(spark, spec, tmp_path / "out", 1 + 4 * sys.float_info.epsilon)
    [result] = compare(spark, spec, 3)
    assert result.equal, result
    shutil.rmtree(tmp_path / "out")
    _released(spark, spec, tmp_path / "out", 1 + 1e-6)
    [result] = compare(spark, spec, 3)
    assert not result.equal and result.missing == result.expected_rows, result


def test_an_output_cut_into_buckets_compares_as_it_does_whole(tmp_path: Path, spark: Any, monkeypatch: Any) -> None:
    """The bucketed comparison (outputs too large to collect) counts what the whole one counts."""
    from ftpipeline.oracle import buckets
    from ftpipeline.oracle.compare import compare_tables

    keys = [f"k{i % 37}" for i in range(500)]
    want = pa.table({"k": keys, "step": pa.array([i % 5 for i in range(500)], pa.int32()),
                     "total": [i * 0.1 for i in range(500)]})
    got = want.slice(0, 480)  # 20 missing
    got = pa.concat_tables([got, want.slice(0, 7), pa.table({"k": ["zz"], "step": pa.array([1], pa.int32()),
                                                            "total": [1.0]})])  # 7 duplicated, 1 extra
    expected_df, actual_df = spark.createDataFrame(want), spark.createDataFrame(got)
    whole = compare_tables("s", want, got)
    monkeypatch.setattr(buckets, "BUCKET_ROWS", 60)
    cut = buckets.compare_frames("s", expected_df, actual_df, 500, tmp_path)
    assert buckets.buckets(500) == 9 and len(list((tmp_path / "s-expected").glob("ftpipeline_oracle_bucket=*"))) > 1
    assert (whole.missing, whole.extra, whole.duplicates) == (20, 8, 7)
    assert cut == whole
    assert buckets.compare_frames("s", expected_df, expected_df, 500, tmp_path / "same").equal
