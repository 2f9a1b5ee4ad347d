"""One pipeline's FTPipelineCheckpoint objects: checkpoints asked for by name, and records of the others.

Why here and not in the runtime: a checkpoint is taken by the coordinator as
always (``coordinator/checkpoints.py``, on request, as ``checkpointNonce``
asks); what Kubernetes adds is a name people can list, wait for and restore
from. The states of one object are in ``ftpipeline/spec/checkpoint_schema.py``;
this module moves them, on the pipeline's coordinator thread:

- a request (``spec.alreadyExists`` false) the handler accepted waits here
  Pending; at the next turn of a running coordinator it asks for a checkpoint
  and becomes InProgress; the next commit makes it Committed (epoch, step,
  bytes), and pins it: retention keeps that checkpoint until the object is
  deleted;
- an abort, or a run that ends before the commit, counts a failure: Pending
  again after a doubling backoff, Failed (with a Warning Event) once
  ``spec.backoffLimit`` retries are spent, or at once when the pipeline
  ended (Succeeded, Failed, Suspended) and no run can take it;
- every other committed checkpoint gets a record (``alreadyExists: true``,
  named ``<pipeline>-<epoch>``, owned by the pipeline), and retention's
  deletions delete their records: ``kubectl get ftpcp`` lists what can be
  restored;
- a restore from an older checkpoint deletes the later ones: those asked for
  by name are Failed, saying so.

API errors here (the API server out of reach too) are logged and never stop
the run: the checkpoint itself is committed in ZooKeeper whatever its object
says.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from ftpipeline.spec.checkpoint_schema import CHECKPOINT_KIND, CHECKPOINT_PLURAL, DEFAULT_BACKOFF_LIMIT
from ftpipeline.spec.schema import API_GROUP, API_VERSION, KIND
from ftpipeline_operator import render
from ftpipeline_operator.status import now_iso

log = logging.getLogger("ftpipeline.operator.snapshots")
MAX_BACKOFF_S = 60.0
PostEvent = Callable[[Mapping[str, Any], str, str, str], None]  # (object, type, reason, message)


@dataclass
class Request:
    """A checkpoint asked for by name, not yet committed."""

    name: str
    uid: str
    backoff_limit: int
    failures: int = 0
    due_at: float = 0.0          # Pending until this time (a retry's backoff)
    asked: bool = False          # InProgress: the coordinator was asked for a checkpoint

    def body(self, namespace: str) -> dict[str, Any]:
        """Enough of the object for an Event about it."""
        return {"apiVersion": f"{API_GROUP}/{API_VERSION}", "kind": CHECKPOINT_KIND,
                "metadata": {"name": self.name, "namespace": namespace, "uid": self.uid}}


class Snapshots:
    def __init__(self, namespace: str, pipeline: str, custom: client.CustomObjectsApi, post_event: PostEvent,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.namespace, self.pipeline = namespace, pipeline
        self.custom = custom
        self.post_event = post_event
        self.clock = clock
        self.requests: dict[str, Request] = {}
        self.pinned: dict[str, int] = {}     # a committed request's name -> its epoch (retention keeps it)
        self.records: dict[int, str] | None = None  # epoch -> record name (listed once, then kept up to date)
        self._lock = threading.Lock()        # handlers add and remove; the coordinator thread moves states

    # --- from the handlers -------------------------------------------------
    def accept(self, obj: Mapping[str, Any]) -> None:
        """A request created, or found at the operator's start: Committed ones pin their epoch, the others wait.
        A new one is written Pending first, so that write can never land after the coordinator's InProgress."""
        meta, status = obj["metadata"], obj.get("status") or {}
        name, state = str(meta["name"]), status.get("state")
        if not state:
            self._status(name, state="Pending", message="waiting for the pipeline's next turn")
        with self._lock:
            if state == "Committed" and status.get("epoch"):
                self.pinned[name] = int(status["epoch"])
            elif state != "Failed":
                self.requests[name] = Request(name, str(meta.get("uid", "")),
                                              int(obj["spec"].get("backoffLimit", DEFAULT_BACKOFF_LIMIT)),
                                              int(status.get("failures") or 0))

    def forget(self, name: str) -> None:
        """Its object was deleted: retention may delete the checkpoint now."""
        with self._lock:
            self.requests.pop(name, None)
            self.pinned.pop(name, None)

    def pinned_epochs(self) -> set[int]:
        with self._lock:
            return set(self.pinned.values())

    @property
    def waiting(self) -> bool:
        with self._lock:
            return bool(self.requests)

    # --- from the coordinator thread -----------------------------------------
    def due(self) -> bool:
        """Whether to ask the coordinator for a checkpoint now; the requests asked become InProgress."""
        now = self.clock()
        with self._lock:
            asked = [r for r in self.requests.values() if not r.asked and r.due_at <= now]
            for r in asked:
                r.asked = True
        for r in asked:
            self._status(r.name, state="InProgress", message="", triggeredAt=now_iso())
        return bool(asked)

    def committed(self, info: Mapping[str, Any], pipeline_uid: str) -> None:
        """A checkpoint committed: the requests it answers are Committed; otherwise it gets a record. Then
        records of checkpoints retention deleted are deleted."""
        epoch = int(info["epoch"])
        fields = {"state": "Committed", "message": "", "epoch": epoch, "step": int(info["boundary"]),
                  "bytes": int(info["bytes"]), "seconds": float(info["seconds"]), "committedAt": now_iso(),
                  "pipelineUid": pipeline_uid}
        with self._lock:
            answered = [r for r in self.requests.values() if r.asked]
            for r in answered:
                del self.requests[r.name]
                self.pinned[r.name] = epoch
        for r in answered:
            self._status(r.name, **fields)
            self.post_event(r.body(self.namespace), "Normal", "Committed",
                            f"checkpoint {epoch} of {self.pipeline} committed at step {info['boundary']}")
        records = self._records()
        if not answered:
            self._record(epoch, fields, pipeline_uid)
        kept = {int(e) for e in info.get("kept", [epoch])}
        for old in sorted(e for e in records if e not in kept):
            if self._delete(records[old]):
                del records[old]

    def failed(self, reason: str, ended: bool = False) -> None:
        """The checkpoint asked for did not commit (``reason``); ``ended``: the pipeline stopped for good."""
        now = self.clock()
        with self._lock:
            hit = [r for r in self.requests.values() if r.asked or ended]
            for r in hit:
                r.asked = False
                r.failures += 1
                if ended or r.failures > r.backoff_limit:
                    del self.requests[r.name]
                else:
                    r.due_at = now + min(MAX_BACKOFF_S, 2.0 ** r.failures)
        for r in hit:
            if r.name in self.requests:
                self._status(r.name, state="Pending", failures=r.failures,
                             message=f"{reason}; retry {r.failures} of {r.backoff_limit} in "
                                     f"{r.due_at - now:.0f} s")
                continue
            message = reason if ended else f"{reason} (spec.backoffLimit {r.backoff_limit} spent)"
            self._status(r.name, state="Failed", failures=r.failures, message=message)
            self.post_event(r.body(self.namespace), "Warning", "CheckpointFailed", message)

    def discarded_after(self, epoch: int, why: str) -> None:
        """A restore deleted every checkpoint after ``epoch``: those asked for by name are gone too."""
        with self._lock:
            gone = [name for name, e in self.pinned.items() if e > epoch]
            for name in gone:
                del self.pinned[name]
        for name in gone:
            self._status(name, state="Failed", message=why)
        records = self._records()
        for later in sorted(e for e in records if e > epoch):  # their checkpoints are gone: nothing to restore
            if self._delete(records[later]):
                del records[later]

    def interrupted(self) -> None:
        """The run stopped (a restart, an upgrade) before the checkpoint asked for committed: ask the next one."""
        with self._lock:
            for r in self.requests.values():
                r.asked = False

    # --- the objects ---------------------------------------------------------
    def _status(self, name: str, **fields: Any) -> None:
        try:
            self.custom.patch_namespaced_custom_object_status(API_GROUP, API_VERSION, self.namespace,
                                                              CHECKPOINT_PLURAL, name, {"status": fields})
        except Exception as exc:  # the API server out of reach too: the run goes on (the next write says more)
            log.warning("checkpoint status not written", extra={"checkpoint": name, "error": api_error(exc),
                                                                "pipeline": self.pipeline})

    def _records(self) -> dict[int, str]:
        """The pipeline's records (not its requests), by epoch: listed once per operator, then followed."""
        if self.records is None:
            try:
                listing: dict[str, Any] = self.custom.list_namespaced_custom_object(  # type: ignore[assignment]
                    API_GROUP, API_VERSION, self.namespace, CHECKPOINT_PLURAL,
                    label_selector=f"{render.PIPELINE_LABEL}={self.pipeline}")
            except Exception as exc:
                log.warning("checkpoint records not listed", extra={"error": api_error(exc), "pipeline": self.pipeline})
                return {}
            self.records = {int(o["status"]["epoch"]): o["metadata"]["name"] for o in listing.get("items", [])
                            if o["spec"].get("alreadyExists") and (o.get("status") or {}).get("epoch")}
        return self.records

    def _record(self, epoch: int, fields: Mapping[str, Any], pipeline_uid: str) -> None:
        name = f"{self.pipeline}-{epoch}"
        doc = {"apiVersion": f"{API_GROUP}/{API_VERSION}", "kind": CHECKPOINT_KIND,
               "metadata": {"name": name, "namespace": self.namespace,
                            "labels": {render.PIPELINE_LABEL: self.pipeline},
                            "ownerReferences": [owner(self.pipeline, pipeline_uid)]},
               "spec": {"pipeline": self.pipeline, "alreadyExists": True}}
        try:
            self.custom.create_namespaced_custom_object(API_GROUP, API_VERSION, self.namespace, CHECKPOINT_PLURAL, doc)
        except Exception as exc:
            if not (isinstance(exc, ApiException) and exc.status == 409 and self._is_record(name)):
                log.warning("checkpoint record not created", extra={"checkpoint": name, "error": api_error(exc)})
                return  # 409 of a record: made before the operator restarted; of anything else: not ours to touch
        self._status(name, **fields)
        if self.records is not None:
            self.records[epoch] = name

    def _is_record(self, name: str) -> bool:
        try:
            obj: dict[str, Any] = self.custom.get_namespaced_custom_object(  # type: ignore[assignment]
                API_GROUP, API_VERSION, self.namespace, CHECKPOINT_PLURAL, name)
        except Exception:
            return False
        return bool(obj["spec"].get("alreadyExists")) and obj["spec"].get("pipeline") == self.pipeline

    def _delete(self, name: str) -> bool:
        """Whether the record is gone (a failed delete is tried again at the next commit)."""
        try:
            self.custom.delete_namespaced_custom_object(API_GROUP, API_VERSION, self.namespace,
                                                        CHECKPOINT_PLURAL, name)
        except Exception as exc:
            if not (isinstance(exc, ApiException) and exc.status == 404):
                log.warning("checkpoint record not deleted", extra={"checkpoint": name, "error": api_error(exc)})
                return False
        return True


def api_error(exc: Exception) -> str:
    return f"{exc.status} {exc.reason}" if isinstance(exc, ApiException) else f"{type(exc).__name__}: {exc}"


def owner(pipeline: str, uid: str) -> dict[str, Any]:
    """The owner reference that makes a checkpoint object go with its pipeline."""
    return {"apiVersion": f"{API_GROUP}/{API_VERSION}", "kind": KIND, "name": pipeline, "uid": uid,
            "blockOwnerDeletion": False}
