"""Both object stores keep the protocol (``objectstore/base.py``): a local directory and a real S3 server."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from ftpipeline.objectstore.base import ObjectStore


def test_put_get_size_and_replace(store: ObjectStore) -> None:
    assert store.size("a/b.bin") is None
    with pytest.raises(FileNotFoundError):
        store.get("a/b.bin")
    store.put("a/b.bin", b"one")
    store.put("a/b.bin", b"two!")
    assert store.get("a/b.bin") == b"two!"
    assert store.size("a/b.bin") == 4


def test_put_if_absent_has_one_winner(store: ObjectStore) -> None:
    assert store.put_if_absent("commit/1", b"first")
    assert not store.put_if_absent("commit/1", b"second")
    assert store.get("commit/1") == b"first"
    won: list[int] = []

    def race(i: int) -> Callable[[], None]:
        def go() -> None:
            if store.put_if_absent("commit/2", str(i).encode()):
                won.append(i)
        return go

    threads = [threading.Thread(target=race(i)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1
    assert store.get("commit/2") == str(won[0]).encode()


def test_list_is_by_prefix_at_any_depth(store: ObjectStore) -> None:
    for key in ("s/a", "s/b/c", "s/bb", "t/a", "sx"):
        store.put(key, b".")
    assert store.list("s/") == ["s/a", "s/b/c", "s/bb"]
    assert store.list("s/b") == ["s/b/c", "s/bb"]
    assert store.list() == ["s/a", "s/b/c", "s/bb", "sx", "t/a"]
    assert store.list("nothing/") == []
    store.delete(["s/a", "s/missing"])
    assert store.list("s/") == ["s/b/c", "s/bb"]
    store.delete_prefix("s/")
    assert store.list() == ["sx", "t/a"]


def test_files_go_up_and_come_down_whole(store: ObjectStore, tmp_path: Path) -> None:
    big = tmp_path / "table.sst"
    big.write_bytes(bytes(range(256)) * (40 << 12))  # 40 MiB: more than one upload part
    store.upload("shared/table.sst", big)
    assert store.size("shared/table.sst") == big.stat().st_size
    down = tmp_path / "down.sst"
    store.download("shared/table.sst", down)
    assert down.read_bytes() == big.read_bytes()
    with pytest.raises(FileNotFoundError):
        store.download("shared/missing.sst", tmp_path / "missing")
    assert not (tmp_path / "missing").exists()


def test_a_child_is_rooted_below(store: ObjectStore) -> None:
    child = store.child("epoch-3")
    child.put("state/x", b"1")
    assert store.list() == ["epoch-3/state/x"]
    assert child.uri.endswith("epoch-3")


def test_keys_cannot_leave_the_store(store: ObjectStore) -> None:
    for key in ("../x", "/abs", "a/../../b"):
        with pytest.raises(ValueError, match="leaves the store"):
            store.put(key, b"x")

