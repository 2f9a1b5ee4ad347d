"""Checkpoint storage as the coordinator reaches it: through a worker, never by opening it itself.

A pipeline's checkpoint storage is mounted by its own workers only (on
Kubernetes the operator, which runs the coordinator, never mounts any
pipeline's volumes). So everything the coordinator needs done there is an
action of the worker's control API, answered by whichever worker it asks
(each is idempotent):

- ``checkpoints``: the epochs whose manifest is in storage (Feldera's
  ``checkpoints()``);
- ``checkpoint_manifest``: one of those manifests (what a resume reopens);
- ``publish_checkpoint``: after the commit in ZooKeeper, write the manifest
  beside the snapshots and delete the epochs no longer retained; answers the
  checkpoint's size;
- ``discard_checkpoints``: delete the named epochs (a restore from an older
  checkpoint starts a new history from it: the later ones are not resumed);
- ``reset_checkpoints``: a fresh run empties the pipeline's storage, so no
  checkpoint of an earlier pipeline of the same name is ever reopened.
"""

from __future__ import annotations

from typing import Any

from ftpipeline.checkpoint.storage import CheckpointStorage
from ftpipeline.worker.inputs import InputResolver


class NotCreated(RuntimeError):
    """A storage action before ``create``: the worker does not know the pipeline's storage yet."""


class CheckpointFiles:
    def __init__(self, inputs: InputResolver) -> None:
        self.inputs = inputs  # holds the storage once ``create`` told the worker the pipeline

    def _storage(self) -> CheckpointStorage:
        if self.inputs.storage is None:
            raise NotCreated("the worker has not been created: no checkpoint storage yet")
        return self.inputs.storage

    def _do_checkpoints(self, body: dict[str, Any]) -> list[int]:
        storage = self.inputs.storage
        return storage.committed_epochs() if storage else []

    def _do_checkpoint_manifest(self, body: dict[str, Any]) -> dict[str, Any] | None:
        return self._storage().manifest(int(body["epoch"]))

    def _do_publish_checkpoint(self, body: dict[str, Any]) -> dict[str, Any]:
        storage = self._storage()
        manifest = body["manifest"]
        storage.write_manifest(manifest)
        storage.prune({int(e) for e in body["keep"]} | {int(manifest["epoch"])})
        return {"bytes": storage.size_bytes(int(manifest["epoch"]))}

    def _do_discard_checkpoints(self, body: dict[str, Any]) -> dict[str, Any]:
        storage = self._storage()
        dropped = {int(e) for e in body["epochs"]}
        storage.prune(set(storage.committed_epochs()) - dropped)
        return {"ok": True}

    def _do_reset_checkpoints(self, body: dict[str, Any]) -> dict[str, Any]:
        self._storage().reset()
        return {"ok": True}
