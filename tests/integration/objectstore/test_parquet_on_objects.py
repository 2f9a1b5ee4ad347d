"""The Parquet barrier on an object store (``barrier/objects.py``): a step is visible when its commit object is, one
releaser wins, a crashed release or a zombie's late one stays invisible. On a real S3 server, and on a directory
through the same protocol."""

from __future__ import annotations

import threading
from pathlib import Path

import pyarrow as pa
import pytest

from ftpipeline.barrier.objects import ObjectBundleSink, commit_key, committed_files, read_released
from ftpipeline.objectstore.base import ObjectStore


def rows(step: int, channel: int, n: int = 3) -> pa.Table:
    return pa.table({"k": [f"s{step}c{channel}r{i}" for i in range(n)],
                     "v": pa.array([step * 100 + channel * 10 + i for i in range(n)], pa.int64())})


def sink_on(store: ObjectStore) -> ObjectBundleSink:
    return ObjectBundleSink(store.uri, store=store)


def stage_all(sink: ObjectBundleSink, step: int, channels: int, n: int = 3) -> None:
    for c in range(channels):
        assert sink.stage(step, c, rows(step, c, n))


def test_a_step_is_visible_once_committed_and_replays_are_dropped(store: ObjectStore) -> None:
    sink = sink_on(store)
    assert sink.gt_last() == 0 and sink.last_bundle() is None
    stage_all(sink, 1, 2, n=4)
    assert sink.gt_last() == 0 and committed_files(store.uri, store=store) == {}
    assert sink.release(1, 2)
    bundle = sink.last_bundle()
    assert bundle is not None and (bundle.step, bundle.gt_last, bundle.rows, len(bundle.parts)) == (1, 1, 8, 2)
    assert store.list("_staging/") == []
    assert not sink.stage(1, 0, rows(1, 0))   # a replay of a released step is dropped
    assert not sink.release(1, 2)             # and its release is a no-op
    stage_all(sink, 2, 2)
    assert sink.release(2, 2)
    got = read_released(store.uri, store=store)
    want = pa.concat_tables([rows(s, c, n) for s, n in ((1, 4), (2, 3)) for c in range(2)])
    assert sorted(got.column("k").to_pylist()) == sorted(want.column("k").to_pylist())
    assert sorted(set(got.column("step").to_pylist())) == [1, 2]
    assert read_released(store.uri, up_to=1, store=store).num_rows == 8
    with pytest.raises(RuntimeError, match="before step 3"):
        stage_all(sink, 4, 2)
        sink.release(4, 2)


def test_a_step_missing_a_part_is_not_released(store: ObjectStore) -> None:
    sink = sink_on(store)
    sink.stage(1, 0, rows(1, 0))
    with pytest.raises(RuntimeError, match="1 of 2 parts staged"):
        sink.release(1, 2)
    assert sink.gt_last() == 0 and store.size(commit_key(1)) is None


def test_a_release_that_crashed_before_its_commit_leaves_nothing_visible(store: ObjectStore) -> None:
    sink = sink_on(store)
    stage_all(sink, 1, 2)
    # the crashed attempt's copies, as it left them: data files that no commit names
    store.copy("_staging/step=1/part-00000.parquet", "step=1/part-00000-deadbeef0000.parquet")
    assert sink.gt_last() == 0 and read_released(store.uri, store=store).num_rows == 0
    assert sink_on(store).release(1, 2)   # another worker releases it: its own copies, one commit
    [files] = committed_files(store.uri, store=store).values()
    assert len(files) == 2 and all("deadbeef0000" not in f for f in files)
    assert sorted(store.list("step=1/")) == sorted(files)  # the orphan was swept
    assert read_released(store.uri, store=store).num_rows == 6


def test_racing_releasers_make_one_commit_and_a_zombies_late_release_is_refused(store: ObjectStore) -> None:
    stage_all(sink_on(store), 1, 3)
    won: list[bool] = []
    errors: list[BaseException] = []

    def release() -> None:
        try:
            won.append(sink_on(store).release(1, 3))
        except BaseException as e:  # noqa: BLE001 -- collected and asserted on below
            errors.append(e)

    threads = [threading.Thread(target=release) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert sorted(won) == [False, False, False, True]
    committed = store.get(commit_key(1))
    # a zombie: staged its part again after the release, and releases with its stale view of GT_last
    zombie = sink_on(store)
    zombie._gt = 0
    for c in range(3):
        zombie.stage_batches(1, c, rows(1, c).schema, [rows(1, c, 7)])
    assert not zombie.release(1, 3)
    assert store.get(commit_key(1)) == committed
    assert read_released(store.uri, store=store).num_rows == 9  # the committed 3 x 3, none of the zombie's 7s
