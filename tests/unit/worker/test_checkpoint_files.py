"""CheckpointFiles: the storage actions a worker answers for the coordinator, which never opens storage itself."""

from __future__ import annotations

from pathlib import Path
from typing import cast

import pyarrow as pa
import pytest

from ftpipeline.checkpoint.storage import CheckpointStorage
from ftpipeline.worker.checkpoint_files import CheckpointFiles, NotCreated
from ftpipeline.worker.inputs import InputResolver


class Inputs:
    storage: CheckpointStorage | None = None


def files(tmp_path: Path) -> tuple[CheckpointFiles, CheckpointStorage]:
    inputs = Inputs()
    storage = inputs.storage = CheckpointStorage(tmp_path, "clicks")
    return CheckpointFiles(cast(InputResolver, inputs)), storage


def manifest(epoch: int) -> dict[str, object]:
    return {"epoch": epoch, "boundary": epoch * 5, "states": {}, "offsets": {}, "inflight": {}, "gt_last": 0}


def test_publish_writes_the_manifest_prunes_what_is_not_kept_and_answers_the_size(tmp_path: Path) -> None:
    f, storage = files(tmp_path)
    for epoch in (1, 2):
        storage.write_state(epoch, "agg.0", epoch * 5, pa.table({"k": [1, 2, 3]}))
        f._do_publish_checkpoint({"manifest": manifest(epoch), "keep": [epoch]})
    storage.write_state(3, "agg.0", 15, pa.table({"k": [1]}))  # an aborted checkpoint's leftovers
    done = f._do_publish_checkpoint({"manifest": manifest(4), "keep": [2]})
    assert f._do_checkpoints({}) == [2, 4]
    assert not storage.store.list("epoch-1/") and not storage.store.list("epoch-3/")
    assert done["bytes"] == storage.size_bytes(4) > 0
    assert f._do_checkpoint_manifest({"epoch": 2}) == manifest(2)
    assert f._do_checkpoint_manifest({"epoch": 3}) is None


def test_reset_empties_only_this_pipelines_storage(tmp_path: Path) -> None:
    f, storage = files(tmp_path)
    other = CheckpointStorage(tmp_path, "clicks-2")
    f._do_publish_checkpoint({"manifest": manifest(1), "keep": [1]})
    other.write_manifest(manifest(1))
    f._do_reset_checkpoints({})
    assert f._do_checkpoints({}) == []
    assert other.committed_epochs() == [1]


def test_a_worker_not_yet_created_refuses_storage_actions(tmp_path: Path) -> None:
    f = CheckpointFiles(cast(InputResolver, Inputs()))
    assert f._do_checkpoints({}) == []
    with pytest.raises(NotCreated, match="has not been created"):
        f._do_reset_checkpoints({})
