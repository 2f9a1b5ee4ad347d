"""Both state backends behind one protocol: point reads and writes, eviction, snapshots that
restore equal, and RocksDB's incremental checkpoints and their retention."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from ftpipeline.checkpoint.storage import CheckpointStorage
from ftpipeline.state.backend import STEP, KeyedState, StateBackend, make_backend

SCHEMA = pa.schema([("user", pa.string()), ("day", pa.int32()), ("n", pa.int64()), (STEP, pa.int64())])
KEYS = ["user", "day"]


def rows(users: range, step: int, n: int = 1) -> pa.Table:
    return pa.table({"user": [f"u{i}" for i in users], "day": pa.array([i % 3 for i in users], pa.int32()),
                     "n": pa.array([n] * len(users), pa.int64()), STEP: pa.array([step] * len(users), pa.int64())})


def everything(state: KeyedState) -> dict[tuple[str, int], tuple[int, int]]:
    out = {}
    for r in pa.Table.from_batches(list(state.scan()), schema=state.schema).to_pylist():
        assert (r["user"], r["day"]) not in out
        out[(r["user"], r["day"])] = (r["n"], r[STEP])
    return out


@pytest.fixture(params=["memory", "rocksdb"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> StateBackend:
    return make_backend(request.param, tmp_path / "worker")


def test_get_answers_in_the_order_asked_with_null_rows_for_absent_keys(backend: StateBackend) -> None:
    state = backend.create("agg.0", SCHEMA, KEYS)
    state.put(rows(range(5), step=1))
    got = state.get(pa.table({"user": ["u3", "zz", "u0"], "day": pa.array([0, 1, 0], pa.int32())}))
    assert got.schema == SCHEMA
    assert got.column("n").to_pylist() == [1, None, 1]
    assert got.column(STEP).to_pylist() == [1, None, 1]
    state.close()


def test_put_replaces_by_key_delete_and_evict_remove(backend: StateBackend) -> None:
    state = backend.create("agg.0", SCHEMA, KEYS)
    state.put(rows(range(10), step=1))
    state.put(rows(range(5, 12), step=2, n=7))
    held = everything(state)
    assert len(held) == 12 and held[("u5", 2)] == (7, 2) and held[("u0", 0)] == (1, 1)
    state.delete(pa.table({"user": ["u0"], "day": pa.array([0], pa.int32())}))
    assert state.evict(before_step=2) == 4  # u1..u4 were last updated at step 1
    assert sorted(u for u, _ in everything(state)) == sorted(f"u{i}" for i in range(5, 12))
    state.close()


def test_a_snapshot_restores_equal_on_either_backend(backend: StateBackend, tmp_path: Path) -> None:
    storage = CheckpointStorage(tmp_path / "ckpt", "pipe")
    state = backend.create("agg.0", SCHEMA, KEYS)
    state.put(rows(range(100), step=3))
    write = state.freeze(storage, 1, "agg.0", 3)
    state.put(rows(range(100, 150), step=4))  # after the freeze: not in the snapshot
    snap = write()
    assert snap.step == 3 and snap.rows == 100 and snap.bytes > 0
    for other in ("memory", "rocksdb"):
        back = make_backend(other, tmp_path / f"restore-{other}").restore("agg.0", storage, snap.path, KEYS, 3)
        assert back is not None
        assert everything(back) == {(f"u{i}", i % 3): (1, 3) for i in range(100)}
        back.close()
    state.close()


def test_rocksdb_checkpoints_upload_only_new_table_files_and_prune_unused_ones(tmp_path: Path) -> None:
    storage = CheckpointStorage(tmp_path / "ckpt", "pipe")
    backend = make_backend("rocksdb", tmp_path / "worker")
    state = backend.create("agg.0", SCHEMA, KEYS)
    state.put(rows(range(20_000), step=1))
    first = state.freeze(storage, 1, "agg.0", 1)()
    state.put(rows(range(100), step=2, n=5))  # a few changed keys
    second = state.freeze(storage, 2, "agg.0", 2)()
    assert second.bytes < first.bytes / 10, (first.bytes, second.bytes)
    assert storage.shared_files(1) < storage.shared_files(2)  # the second names the first's files too
    assert storage.size_bytes(2) < storage.size_bytes(1)
    # the checkpoint's own small files (MANIFEST, CURRENT, OPTIONS) are held in its listing: one object
    assert storage.store.list(f"{second.path}/") == [f"{second.path}/files.json"]
    # a restore of the second, checkpointed again unchanged, uploads no table file
    back = backend.restore("agg.0", storage, second.path, KEYS, 2)
    assert back is not None
    third = back.freeze(storage, 3, "agg.0", 2)()
    assert storage.shared_files(3) == storage.shared_files(2)
    assert third.bytes < second.bytes
    storage.prune({3})
    assert not storage.store.list("epoch-1/") and not storage.store.list("epoch-2/")
    assert all(storage.store.size(name) for name in storage.shared_files(3))
    again = backend.restore("agg.0", storage, third.path, KEYS, 2)
    assert again is not None
    held = everything(again)
    assert len(held) == 20_000 and held[("u7", 1)] == (5, 2) and held[("u700", 1)] == (1, 1)
    for s in (state, back, again):
        s.close()


def test_pruning_deletes_a_shared_file_no_kept_checkpoint_names(tmp_path: Path) -> None:
    storage = CheckpointStorage(tmp_path / "ckpt", "pipe")
    backend = make_backend("rocksdb", tmp_path / "worker")
    old = backend.create("agg.0", SCHEMA, KEYS)
    old.put(rows(range(1000), step=1))
    old.freeze(storage, 1, "agg.0", 1)()
    new = backend.create("agg.0", SCHEMA, KEYS)  # another instance: none of its files are old's
    new.put(rows(range(10), step=2))
    new.freeze(storage, 2, "agg.0", 2)()
    only_old = storage.shared_files(1) - storage.shared_files(2)
    assert only_old
    storage.prune({2})
    assert not any(storage.store.size(name) is not None for name in only_old)
    assert all(storage.store.size(name) for name in storage.shared_files(2))
    old.close()
    new.close()


def test_an_unknown_backend_is_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="state.backend.*'leveldb'"):
        make_backend("leveldb", tmp_path)


def test_an_indexed_state_evicts_only_rows_not_updated_since(backend: StateBackend) -> None:
    state = backend.create("agg.0", SCHEMA, KEYS, index=STEP)
    state.put(rows(range(10), step=1))
    state.put(rows(range(5), step=4))       # u0..u4 updated again: their step-1 entries are stale
    assert state.evict(before_step=2) == 5  # u5..u9
    assert state.evict(before_step=2) == 0  # nothing left that old
    assert sorted(everything(state)) == sorted((f"u{i}", i % 3) for i in range(5))
    assert state.evict(before_step=5) == 5
    assert everything(state) == {}
    state.close()


def test_a_state_indexed_by_a_time_gives_up_the_rows_below_a_bound_negative_times_too(backend: StateBackend) -> None:
    schema = pa.schema([("k", pa.string()), ("fire", pa.int64()), (STEP, pa.int64())])
    state = backend.create("w.0", schema, ["k"], index="fire")
    times = [-5_000, -1, 0, 7, 1 << 40]
    state.put(pa.table({"k": [f"k{i}" for i in range(5)], "fire": times, STEP: [1] * 5}, schema=schema))
    state.put(pa.table({"k": ["k1"], "fire": [50], STEP: [2]}, schema=schema))  # moved later: its old entry is stale
    taken = state.expire(8)
    assert sorted(taken.column("fire").to_pylist()) == [-5_000, 0, 7]
    assert sorted(everything_of(state)) == ["k1", "k4"] and state.expire(8).num_rows == 0
    assert sorted(state.expire(1 << 41).column("k").to_pylist()) == ["k1", "k4"]
    assert everything_of(state) == []


def everything_of(state: KeyedState) -> list[str]:
    return [k for b in state.scan() for k in b.column(0).to_pylist()]


def test_rocksdb_checkpoints_stay_flat_as_flushes_pile_up(tmp_path: Path) -> None:
    """Each checkpoint flushes, and RocksDB records each flush in its MANIFEST, which a checkpoint holds a copy
    of: capped (MANIFEST_BYTES), it rolls over, so the thousandth checkpoint of an unchanging state is no bigger
    than the hundredth."""
    from ftpipeline.state.rocks import MANIFEST_BYTES

    storage = CheckpointStorage(tmp_path / "ckpt", "pipe")
    state = make_backend("rocksdb", tmp_path / "worker").create("agg.0", SCHEMA, KEYS)
    sizes = []
    for step in range(1, 1001):
        state.put(rows(range(step % 50, step % 50 + 10), step=step))  # the same 60 keys over and over
        snapshot = state.freeze(storage, step, "agg.0", step)()
        sizes.append(snapshot.bytes)
        storage.prune({step})
    manifests = [p.stat().st_size for p in (tmp_path / "worker").rglob("MANIFEST-*")]
    state.close()
    assert max(manifests) <= 2 * MANIFEST_BYTES, manifests
    assert max(sizes[900:]) <= 1.25 * max(sizes[100:200]), (max(sizes[100:200]), max(sizes[900:]))
