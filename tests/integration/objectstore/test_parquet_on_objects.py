"""The Parquet barrier on an object store (``barrier/objects.py``): a step is visible when its commit object is, one
releaser wins, a crashed release or a zombie's late one stays invisible. On a real S3 server, and on a directory
through the same protocol."""

from __future__ import annotations

import threading

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
    assert set(store.list("step=1/")) == set(bundle.parts)  # no copy: the staged parts are the data
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


def test_a_step_staged_twice_and_not_released_leaves_nothing_visible(store: ObjectStore) -> None:
    sink = sink_on(store)
    stage_all(sink, 1, 2)
    assert sink.stage(1, 0, rows(1, 0))   # channel 0's task ran again (a recovery): a second part of it
    assert len(store.list("step=1/")) == 3
    assert sink.gt_last() == 0 and sink.has_staged() and read_released(store.uri, store=store).num_rows == 0
    assert sink_on(store).release(1, 2)   # another worker releases it: one part of each channel, one commit
    [files] = committed_files(store.uri, store=store).values()
    assert len(files) == 2 and sorted(store.list("step=1/")) == sorted(files)  # the spare part was swept
    assert read_released(store.uri, store=store).num_rows == 6 and not sink.has_staged()
    stage_all(sink, 2, 2)                 # a step an earlier run staged and never released
    sink.clear_staging()
    assert store.list("step=2/") == [] and sink.gt_last() == 1


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
    # a zombie with a stale view of GT_last: its first late part lands, named by no commit (its next ones see the
    # commit: a step it staged before is looked up), and its release is refused
    zombie = sink_on(store)
    zombie._gt = 0
    assert zombie.stage(1, 0, rows(1, 0, 7))
    assert not zombie.stage(1, 1, rows(1, 1, 7)) and not zombie.stage(1, 2, rows(1, 2, 7))
    assert not zombie.release(1, 3)
    assert store.get(commit_key(1)) == committed
    assert read_released(store.uri, store=store).num_rows == 9  # the committed 3 x 3, none of the zombie's 7s
    assert not any(k.endswith("-7r.parquet") for k in store.list("step=1/"))  # and its parts were swept
    # a replacement worker replaying the released step: dropped before anything is written
    assert not sink_on(store).stage(1, 0, rows(1, 0)) and len(store.list("step=1/")) == 3
