"""ParquetBundleSink: staged parts, atomic release with GT_last, dropped replays, hive-readable output."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from ftpipeline.barrier.bundles import MANIFEST, Bundle, ParquetBundleSink


def rows(step: int, channel: int, n: int = 3) -> pa.Table:
    return pa.table({
        "k": [f"s{step}c{channel}r{i}" for i in range(n)],
        "v": pa.array([step * 100 + channel * 10 + i for i in range(n)], pa.int64()),
    })


def stage_all(sink: ParquetBundleSink, step: int, channels: int, n: int = 3) -> None:
    for ch in range(channels):
        assert sink.stage(step, ch, rows(step, ch, n)) is True


def visible(path: Path) -> pa.Table:
    return ds.dataset(path, format="parquet", partitioning="hive").to_table()


def test_fresh_sink_has_nothing_released(tmp_path: Path) -> None:
    sink = ParquetBundleSink(tmp_path / "out")
    assert sink.released_steps() == []
    assert sink.gt_last() == 0
    assert sink.last_bundle() is None


def test_stage_then_release(tmp_path: Path) -> None:
    sink = ParquetBundleSink(tmp_path / "out")
    stage_all(sink, 1, channels=3, n=4)
    assert sink.gt_last() == 0  # staged is not released
    assert not (tmp_path / "out" / "step=1").exists()

    assert sink.release(1, channels=3) is True

    step_dir = tmp_path / "out" / "step=1"
    assert sorted(p.name for p in step_dir.iterdir()) == [
        MANIFEST, "part-00000.parquet", "part-00001.parquet", "part-00002.parquet",
    ]
    manifest = json.loads((step_dir / MANIFEST).read_text())
    assert manifest == {
        "step": 1,
        "gt_last": 1,
        "parts": ["part-00000.parquet", "part-00001.parquet", "part-00002.parquet"],
        "rows": 12,
    }
    assert pq.read_table(step_dir / "part-00001.parquet").equals(rows(1, 1, 4))
    assert not (tmp_path / "out" / "_staging" / "step=1").exists()


def test_gt_last_and_last_bundle_follow_releases(tmp_path: Path) -> None:
    sink = ParquetBundleSink(tmp_path / "out")
    for step in (1, 2, 3):
        stage_all(sink, step, channels=2, n=step)
        assert sink.release(step, channels=2)
        assert sink.gt_last() == step
        assert sink.last_bundle() == Bundle(
            step=step, gt_last=step, parts=("part-00000.parquet", "part-00001.parquet"), rows=2 * step
        )
    assert sink.released_steps() == [1, 2, 3]


def test_gt_last_is_read_back_by_a_new_instance(tmp_path: Path) -> None:
    sink = ParquetBundleSink(tmp_path / "out")
    for step in (1, 2):
        stage_all(sink, step, channels=1)
        sink.release(step, channels=1)
    restarted = ParquetBundleSink(tmp_path / "out")
    assert restarted.gt_last() == 2
    assert restarted.last_bundle() is not None
    assert restarted.last_bundle().step == 2


def test_released_steps_sorted_numerically(tmp_path: Path) -> None:
    sink = ParquetBundleSink(tmp_path / "out")
    for step in range(1, 12):
        stage_all(sink, step, channels=1, n=1)
        sink.release(step, channels=1)
    assert sink.released_steps() == list(range(1, 12))
    assert sink.gt_last() == 11


def test_staging_a_released_step_is_dropped(tmp_path: Path) -> None:
    sink = ParquetBundleSink(tmp_path / "out")
    stage_all(sink, 1, channels=2)
    sink.release(1, channels=2)
    before = (tmp_path / "out" / "step=1" / "part-00000.parquet").read_bytes()

    assert sink.stage(1, 0, rows(99, 0, 50)) is False
    assert not (tmp_path / "out" / "_staging" / "step=1").exists()
    assert (tmp_path / "out" / "step=1" / "part-00000.parquet").read_bytes() == before
    assert visible(tmp_path / "out").num_rows == 6


def test_staging_below_gt_last_is_dropped(tmp_path: Path) -> None:
    sink = ParquetBundleSink(tmp_path / "out")
    for step in (1, 2):
        stage_all(sink, step, channels=1)
        sink.release(step, channels=1)
    assert sink.stage(1, 0, rows(1, 0)) is False
    assert not (tmp_path / "out" / "_staging" / "step=1").exists()


def test_release_of_a_released_step_is_idempotent(tmp_path: Path) -> None:
    sink = ParquetBundleSink(tmp_path / "out")
    stage_all(sink, 1, channels=2)
    assert sink.release(1, channels=2) is True
    assert sink.release(1, channels=2) is False
    assert sink.released_steps() == [1]
    assert sink.last_bundle() is not None
    assert sink.last_bundle().rows == 6


def test_release_out_of_order_raises(tmp_path: Path) -> None:
    sink = ParquetBundleSink(tmp_path / "out")
    stage_all(sink, 1, channels=1)
    stage_all(sink, 2, channels=1)
    with pytest.raises(RuntimeError, match="cannot release step 2 before step 1"):
        sink.release(2, channels=1)
    assert sink.gt_last() == 0
    assert sink.release(1, channels=1) and sink.release(2, channels=1)
    assert sink.gt_last() == 2


def test_release_with_a_missing_part_raises_and_releases_nothing(tmp_path: Path) -> None:
    sink = ParquetBundleSink(tmp_path / "out")
    sink.stage(1, 0, rows(1, 0))
    sink.stage(1, 2, rows(1, 2))
    with pytest.raises(RuntimeError, match="2 of 3 parts"):
        sink.release(1, channels=3)
    assert sink.gt_last() == 0
    assert sink.released_steps() == []
    assert not (tmp_path / "out" / "step=1").exists()
    # the missing part arrives: now it releases
    sink.stage(1, 1, rows(1, 1))
    assert sink.release(1, channels=3) is True


def test_release_of_a_step_never_staged_raises(tmp_path: Path) -> None:
    sink = ParquetBundleSink(tmp_path / "out")
    with pytest.raises(RuntimeError, match="0 of 1 parts"):
        sink.release(1, channels=1)
    assert sink.gt_last() == 0


def test_restaging_a_part_overwrites_it(tmp_path: Path) -> None:
    sink = ParquetBundleSink(tmp_path / "out")
    sink.stage(1, 0, rows(1, 0, 5))
    sink.stage(1, 0, rows(1, 0, 5))  # a replayed task writes the same part again
    sink.stage(1, 1, rows(1, 1, 5))
    sink.release(1, channels=2)
    table = visible(tmp_path / "out")
    assert table.num_rows == 10
    assert sorted(table.column("k").to_pylist()) == sorted(
        rows(1, 0, 5).column("k").to_pylist() + rows(1, 1, 5).column("k").to_pylist()
    )
    assert sink.last_bundle() is not None
    assert sink.last_bundle().rows == 10
    assert [p.name for p in (tmp_path / "out" / "step=1").iterdir() if p.name.startswith(".")] == []


def test_readers_see_only_released_steps(tmp_path: Path) -> None:
    sink = ParquetBundleSink(tmp_path / "out")
    for step in (1, 2):
        stage_all(sink, step, channels=2)
        sink.release(step, channels=2)
    stage_all(sink, 3, channels=2)  # staged, not released
    sink.stage(4, 0, rows(4, 0))  # partially staged

    table = visible(tmp_path / "out")
    assert table.num_rows == 12
    assert sorted(set(table.column("step").to_pylist())) == [1, 2]
    expected = sorted(k for s in (1, 2) for c in range(2) for k in rows(s, c).column("k").to_pylist())
    assert sorted(table.column("k").to_pylist()) == expected


def test_reset_removes_everything(tmp_path: Path) -> None:
    sink = ParquetBundleSink(tmp_path / "out")
    stage_all(sink, 1, channels=1)
    sink.release(1, channels=1)
    sink.reset()
    assert not (tmp_path / "out").exists()
    assert sink.gt_last() == 0
    sink.reset()  # nothing to remove: no error


def test_a_part_staged_a_table_at_a_time_is_the_part_of_their_rows(tmp_path: Path) -> None:
    sink = ParquetBundleSink(tmp_path / "out")
    pieces = [rows(1, 0, 2), rows(1, 0, 2).slice(0, 0), rows(1, 1, 3)]
    assert sink.stage_batches(1, 0, pieces[0].schema, iter(pieces)) is True
    assert sink.release(1, 1) is True
    assert pq.read_table(tmp_path / "out" / "step=1" / "part-00000.parquet") == pa.concat_tables(pieces)
    assert sink.stage_batches(1, 0, pieces[0].schema, iter(pieces)) is False, "a released step's replay is dropped"


def test_a_part_staged_by_a_run_with_more_channels_is_never_released(tmp_path: Path) -> None:
    """A step three channels staged, then resumed on two (the sink's parallelism lowered): the third
    channel's part is the earlier run's and is deleted, not released with the step."""
    sink = ParquetBundleSink(tmp_path / "out")
    stage_all(sink, 1, channels=3)
    stage_all(sink, 1, channels=2)  # the new run stages the step again
    assert sink.release(1, channels=2) is True
    assert sorted(p.name for p in (tmp_path / "out" / "step=1").iterdir()) == [
        MANIFEST, "part-00000.parquet", "part-00001.parquet"]
    assert visible(tmp_path / "out").num_rows == 6
