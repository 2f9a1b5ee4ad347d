"""CheckpointStorage on a temporary directory: layout, state files, manifests, listing and pruning (the same on a
bucket: ``tests/integration/objectstore/test_checkpoints_on_s3.py``)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pytest

from ftpipeline.checkpoint.storage import CheckpointStorage
from ftpipeline.checkpoint.tracker import ChannelSnapshot


def storage(tmp_path: Path) -> CheckpointStorage:
    return CheckpointStorage(tmp_path, "pipe")


def manifest(epoch: int, **extra: object) -> dict[str, object]:
    return {"epoch": epoch, "boundary": 4, "offsets": {"events.0": 500}, "gt_last": 4,
            "states": {}, "inflight": {}, **extra}


TABLE = pa.table({"k": ["a", "b", "c"], "n": [3, 1, 2]})


def test_layout(tmp_path: Path) -> None:
    s = storage(tmp_path)
    assert s.store.uri == str(tmp_path / "pipe")
    assert s.state_key(3, "agg.1") == "epoch-3/state/agg.1.parquet"
    assert s.inflight_key(3, "clean.0.4.agg.1.1") == "epoch-3/inflight/clean.0.4.agg.1.1.arrow"
    s.write_state(3, "agg.1", 1, TABLE)
    assert (tmp_path / "pipe" / "epoch-3" / "state" / "agg.1.parquet").is_file()


def test_write_state_and_read_it_back(tmp_path: Path) -> None:
    s = storage(tmp_path)
    snap = s.write_state(2, "agg.1", 7, TABLE)
    assert snap.channel == "agg.1" and snap.step == 7
    assert snap.path == "epoch-2/state/agg.1.parquet"      # relative to the pipeline's root
    assert snap.rows == 3
    assert snap.bytes == s.store.size(s.state_key(2, "agg.1")) > 0
    back = s.read_state(vars(snap))
    assert back is not None and back.equals(TABLE)


def test_write_state_records_its_metadata_next_to_it(tmp_path: Path) -> None:
    s = storage(tmp_path)
    snap = s.write_state(2, "agg.1", 7, TABLE)
    meta = json.loads(s.store.get("epoch-2/state/agg.1.json"))
    assert ChannelSnapshot(**meta) == snap


def test_empty_state_has_no_file(tmp_path: Path) -> None:
    s = storage(tmp_path)
    snap = s.write_state(2, "agg.0", 5, None)
    assert snap == ChannelSnapshot("agg.0", 5, "", 0, 0)
    assert s.store.list("epoch-2/") == ["epoch-2/state/agg.0.json"]
    assert s.read_state(vars(snap)) is None
    meta = json.loads(s.store.get("epoch-2/state/agg.0.json"))
    assert meta["path"] == "" and meta["step"] == 5


def test_state_write_leaves_no_temporary_files(tmp_path: Path) -> None:
    s = storage(tmp_path)
    s.write_state(1, "agg.0", 1, TABLE)
    s.write_state(1, "agg.0", 2, TABLE.slice(0, 1))      # overwrite
    names = sorted(p.name for p in (tmp_path / "pipe" / "epoch-1" / "state").iterdir())
    assert names == ["agg.0.json", "agg.0.parquet"]
    back = s.read_state({"path": "epoch-1/state/agg.0.parquet"})
    assert back is not None and back.num_rows == 1


def test_manifest_round_trip(tmp_path: Path) -> None:
    s = storage(tmp_path)
    m = manifest(3, states={"agg.1": {"channel": "agg.1", "step": 4, "path": "p", "rows": 1, "bytes": 2}},
                 inflight={"clean.0.4.agg.1.1": 9})
    s.write_manifest(m)
    assert s.manifest(3) == m
    assert s.store.list() == ["epoch-3/manifest.json"]


def test_missing_manifest_is_none(tmp_path: Path) -> None:
    s = storage(tmp_path)
    assert s.manifest(1) is None
    s.write_state(1, "agg.0", 1, TABLE)
    assert s.manifest(1) is None


def test_manifest_is_replaced_atomically(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    s = storage(tmp_path)
    s.write_manifest(manifest(3, gt_last=4))

    def crash(src: object, dst: object) -> None:
        raise OSError("disk gone")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="disk gone"):
        s.write_manifest(manifest(3, gt_last=9))
    monkeypatch.undo()
    assert s.manifest(3) == manifest(3, gt_last=4)      # the old manifest is intact, never half-written
    s.write_manifest(manifest(3, gt_last=9))
    assert s.manifest(3) == manifest(3, gt_last=9)


def test_committed_epochs_lists_only_epochs_with_a_manifest(tmp_path: Path) -> None:
    s = storage(tmp_path)
    assert s.committed_epochs() == []                   # no root yet
    for e in (10, 2, 1):
        s.write_manifest(manifest(e))
    s.write_state(3, "agg.0", 1, TABLE)                 # taken, never committed
    s.store.put("epoch-x/manifest.json", b"{}")
    s.store.put("other/manifest.json", b"{}")
    assert s.committed_epochs() == [1, 2, 10]           # numeric order


def test_size_bytes(tmp_path: Path) -> None:
    s = storage(tmp_path)
    assert s.size_bytes(1) == 0
    snap = s.write_state(1, "agg.0", 1, TABLE)
    s.write_manifest(manifest(1))
    s.store.put(s.inflight_key(1, "a.0.1.b.0.0"), b"x" * 123)
    files = [s.state_key(1, "agg.0"), "epoch-1/state/agg.0.json", "epoch-1/manifest.json", s.inflight_key(1, "a.0.1.b.0.0")]
    assert s.size_bytes(1) == sum(s.store.size(k) or 0 for k in files)
    assert s.size_bytes(1) >= snap.bytes + 123
    assert s.size_bytes(2) == 0


def test_prune_keeps_exactly_the_given_epochs(tmp_path: Path) -> None:
    s = storage(tmp_path)
    s.prune({1})                                        # no root: nothing to do
    for e in (1, 2, 3, 4):
        s.write_manifest(manifest(e))
    s.write_state(5, "agg.0", 1, None)                  # an aborted checkpoint's files
    s.store.put("notes/a", b"kept")
    s.prune({2, 4, 9})
    assert sorted(p.name for p in (tmp_path / "pipe").iterdir()) == ["epoch-2", "epoch-4", "notes"]
    assert s.committed_epochs() == [2, 4]
    assert s.manifest(4) == manifest(4)


def test_reset_removes_everything(tmp_path: Path) -> None:
    s = storage(tmp_path)
    s.write_manifest(manifest(1))
    other = CheckpointStorage(tmp_path, "other")
    other.write_manifest(manifest(1))
    s.reset()
    assert not (tmp_path / "pipe").exists()
    assert other.committed_epochs() == [1]
