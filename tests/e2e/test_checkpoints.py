"""Checkpoints as resources: one is asked for by name, the committed ones are listed, the pipeline is restored.

One stateful pipeline (the clickstream's per-user running totals) runs on
the local cluster, checkpointing every 3 steps and keeping 2. An
``FTPipelineCheckpoint`` is created for it: it goes Committed with its epoch,
step and size, and while later checkpoints come and go its checkpoint is
kept (it was asked for by name), while the operator's records of the
periodic ones follow retention. ``kubectl get ftpcp`` lists them. A
checkpoint of a pipeline that does not exist is Failed with a Warning
Event, and a restore from a checkpoint that does not exist is refused
without stopping the run. Then ``spec.restoreFrom`` names the checkpoint:
the run stops, resumes from it (Restored, the later checkpoints deleted),
replays the steps after it, and finishes. Its output equals the oracle's
with no duplicate: going back in time repeated nothing the sink had
released.
"""

from __future__ import annotations

import subprocess
from typing import Any

from kubernetes import client

from .test_operator import (GROUP, PLURAL, VERSION, compare, events, finished, operator,  # noqa: F401
                            oracle_spec, spark, start, status, wait_for)

CHECKPOINTS = "ftpipelinecheckpoints"


def _checkpoint(api: client.CustomObjectsApi, namespace: str, name: str, pipeline: str) -> None:
    api.create_namespaced_custom_object(GROUP, VERSION, namespace, CHECKPOINTS, {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "FTPipelineCheckpoint", "metadata": {"name": name},
        "spec": {"pipeline": pipeline}})


def _state(api: client.CustomObjectsApi, namespace: str, name: str) -> dict[str, Any]:
    return dict(api.get_namespaced_custom_object(GROUP, VERSION, namespace, CHECKPOINTS, name).get("status") or {})


def _records(api: client.CustomObjectsApi, namespace: str, pipeline: str) -> dict[int, str]:
    """The operator's records of periodic checkpoints, by epoch."""
    items = api.list_namespaced_custom_object(GROUP, VERSION, namespace, CHECKPOINTS)["items"]
    return {int(o["status"]["epoch"]): o["metadata"]["name"] for o in items
            if o["spec"]["pipeline"] == pipeline and o["spec"].get("alreadyExists") and o.get("status", {}).get("epoch")}


def _listed(api: client.CustomObjectsApi, namespace: str, pipeline: str
            ) -> tuple[dict[int, str], subprocess.CompletedProcess[str]] | None:
    """The records and ``kubectl get ftpcp`` of one moment: None if a checkpoint came or went meanwhile
    (one commits every second or two, and retention deletes a record as it does)."""
    before = _records(api, namespace, pipeline)
    listing = subprocess.run(["kubectl", "get", "ftpcp", "-n", namespace], capture_output=True, text=True, check=True)
    return (before, listing) if _records(api, namespace, pipeline) == before else None


def test_a_checkpoint_is_taken_by_name_listed_and_restored_from(
        kube: client.ApiClient, namespace: str, operator: str, spark: object) -> None:
    api = client.CustomObjectsApi(kube)
    core = client.CoreV1Api(kube)
    steps = 45
    name, doc, data = start(api, namespace, "ckpt", steps, until=4)

    # 1. trigger: Committed, with its epoch, step and size
    _checkpoint(api, namespace, "before-change", name)
    taken = wait_for("the checkpoint to commit",
                     lambda: (s := _state(api, namespace, "before-change")).get("state") == "Committed" and s, 120)
    assert taken["step"] >= 4 and taken["bytes"] > 0 and taken["epoch"] >= 1, taken
    print(f"checkpoint before-change: epoch {taken['epoch']}, step {taken['step']}, {taken['bytes']} bytes")

    # 2. boundaries: no such pipeline; a restore from no such checkpoint (the run goes on, untouched). Early in
    # the run: its 45 steps may all commit within the next 30 s
    _checkpoint(api, namespace, "orphan", "no-such-pipeline")
    orphan = wait_for("the orphan to fail", lambda: (s := _state(api, namespace, "orphan")).get("state") == "Failed"
                      and s, 60)
    assert "does not exist (spec.pipeline)" in orphan["message"], orphan
    assert wait_for("its Warning Event", lambda: events(core, namespace, "orphan", "CheckpointFailed"), 30)
    pods = {p.metadata.name: p.metadata.uid for p in core.list_namespaced_pod(namespace).items
            if p.metadata.name.startswith(name)}
    assert pods, "the run ended before a restore could be refused while it runs"
    api.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name,
                                       {"spec": {"restoreFrom": {"checkpoint": "no-such-checkpoint"}}})
    refused = wait_for("the refusal", lambda: (status(api, namespace, name).get("lastRestore") or {})
                       .get("result") == "Refused" and status(api, namespace, name)["lastRestore"], 60)
    assert "does not exist (spec.restoreFrom.checkpoint)" in refused["message"], refused
    assert events(core, namespace, name, "RestoreRefused")
    still = {p.metadata.name: p.metadata.uid for p in core.list_namespaced_pod(namespace).items
             if p.metadata.name.startswith(name)}
    assert still == pods, "a refused restore stopped the run"

    # 3. list: later checkpoints come and go (retain 2), records follow, the named one is kept
    wait_for("three more checkpoints", lambda: max(_records(api, namespace, name), default=0) >= taken["epoch"] + 3,
             300)
    records, listing = wait_for("a listing taken while retention stood still",
                                lambda: _listed(api, namespace, name), 60)
    assert len(records) <= 2, records  # retention deleted the older records
    print(listing.stdout)
    assert "before-change" in listing.stdout and "Committed" in listing.stdout
    assert all(records[e] in listing.stdout for e in records)
    newest_before = max(records)

    # 4. restore from the named checkpoint: the run resumes from it and the later checkpoints go
    api.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name,
                                       {"spec": {"restoreFrom": {"checkpoint": "before-change"}}})
    restored = wait_for("the restore", lambda: (status(api, namespace, name).get("lastRestore") or {})
                        .get("result") == "Restored" and status(api, namespace, name)["lastRestore"], 300)
    assert (restored["epoch"], restored["step"]) == (taken["epoch"], taken["step"]), restored
    [message, *_] = events(core, namespace, name, "Restored")
    print(f"restored: {message}")
    wait_for("the later checkpoints' records to go", lambda: not any(
        taken["epoch"] < e <= newest_before for e in _records(api, namespace, name)), 300)

    final = finished(api, namespace, name)
    assert final["phase"] == "Succeeded" and final["committedStep"] == steps, final
    [result] = compare(spark, oracle_spec(doc, data), steps)
    assert result.duplicates == 0, result
    assert result.equal, result
    api.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
