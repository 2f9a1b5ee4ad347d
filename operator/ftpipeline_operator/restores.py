"""``spec.restoreFrom``: a pipeline resumed from one of its checkpoints, named by its FTPipelineCheckpoint.

Why a field of the pipeline and not an action on the checkpoint: the
pipeline's spec says what it runs, and a restore changes that (as Flink's
``initialSavepointPath`` with its redeploy nonce). A restore is asked once
per value of ``spec.restoreFrom`` (checkpoint and nonce); ``status.lastRestore``
says which value was done, so an operator that restarts does not restore
again. The run it stops resumes from the named checkpoint instead of the
newest, and checkpoints committed after it are deleted
(``coordinator/checkpoints.py``: a new history starts there)::

    ASKED    --the named checkpoint is this pipeline's and Committed--> RESTORING (the run stops; resume_epoch;
              status.lastRestore says Restoring first, so an operator that restarts meanwhile does not restore
              twice: it would delete what was committed since)
    ASKED    --missing, another pipeline's, not Committed--> REFUSED (the run goes on untouched)
    RESTORING --every worker reopened it--> RESTORED (status.lastRestore, an Event)
    RESTORING --the coordinator refused it before touching anything (RestoreRefused)--> REFUSED
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from ftpipeline.spec.checkpoint_schema import CHECKPOINT_PLURAL
from ftpipeline.spec.schema import API_GROUP, API_VERSION
from ftpipeline_operator.status import now_iso

FIELD = "spec.restoreFrom.checkpoint"


class Refused(Exception):
    """The named checkpoint cannot be restored; the message names it and why."""


@dataclass(frozen=True)
class Restore:
    checkpoint: str
    nonce: str
    epoch: int = 0
    step: int = 0

    def status(self, result: str, message: str = "") -> dict[str, Any]:
        return {"lastRestore": {"checkpoint": self.checkpoint, "nonce": self.nonce, "epoch": self.epoch,
                                "step": self.step, "result": result, "message": message, "time": now_iso()}}


def asked(body: Mapping[str, Any], done: tuple[str, str] | None) -> Restore | None:
    """The restore ``body`` asks for that is not ``done`` yet (checkpoint, nonce), if any."""
    want = body["spec"].get("restoreFrom") or {}
    if not want.get("checkpoint"):
        return None
    key = (str(want["checkpoint"]), str(want.get("nonce") or ""))
    return None if key == done else Restore(*key)


def done_in(status: Mapping[str, Any]) -> tuple[str, str] | None:
    last = status.get("lastRestore") or {}
    return (str(last["checkpoint"]), str(last.get("nonce") or "")) if last.get("checkpoint") else None


def resolve(custom: client.CustomObjectsApi, body: Mapping[str, Any], restore: Restore) -> Restore:
    """The checkpoint's epoch and step, once it is known to be this pipeline's and committed."""
    meta = body["metadata"]
    name = restore.checkpoint
    try:
        obj: dict[str, Any] = custom.get_namespaced_custom_object(  # type: ignore[assignment]
            API_GROUP, API_VERSION, meta["namespace"], CHECKPOINT_PLURAL, name)
    except Exception as exc:  # the API server out of reach too: refused now, asked again by a new nonce
        what = ("does not exist" if isinstance(exc, ApiException) and exc.status == 404 else
                f"cannot be read ({exc.status} {exc.reason})" if isinstance(exc, ApiException) else
                f"cannot be read ({type(exc).__name__})")
        raise Refused(f"FTPipelineCheckpoint {name} {what} ({FIELD})") from None
    status = obj.get("status") or {}
    if obj["spec"].get("pipeline") != meta["name"]:
        raise Refused(f"FTPipelineCheckpoint {name} is a checkpoint of {obj['spec'].get('pipeline')}, "
                      f"not of {meta['name']} ({FIELD})")
    if status.get("state") != "Committed" or not status.get("epoch"):
        raise Refused(f"FTPipelineCheckpoint {name} is {status.get('state') or 'Pending'}, not Committed ({FIELD})")
    if status.get("pipelineUid") != meta.get("uid"):
        raise Refused(f"FTPipelineCheckpoint {name} was taken by an earlier pipeline named {meta['name']} "
                      f"(its state went with it) ({FIELD})")
    return Restore(restore.checkpoint, restore.nonce, int(status["epoch"]), int(status.get("step") or 0))
