"""FTPipelineCheckpoint objects move Pending -> InProgress -> Committed (or Failed after their retries), and
records of periodic checkpoints follow retention."""

from __future__ import annotations

from typing import Any

from kubernetes.client.exceptions import ApiException

from ftpipeline_operator.snapshots import Snapshots
from tests.unit.coordinator.test_checkpoint_schedule import Clock


class CheckpointApi:
    """The custom objects API over FTPipelineCheckpoints: objects by name, with their status."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.deleted: list[str] = []
        self.refuse_deletes = False

    def patch_namespaced_custom_object_status(self, group: str, version: str, namespace: str, plural: str,
                                              name: str, body: dict[str, Any]) -> None:
        if name not in self.objects:
            raise ApiException(status=404, reason="Not Found")
        self.objects[name].setdefault("status", {}).update(body["status"])

    def create_namespaced_custom_object(self, group: str, version: str, namespace: str, plural: str,
                                        body: dict[str, Any]) -> None:
        name = body["metadata"]["name"]
        if name in self.objects:
            raise ApiException(status=409, reason="AlreadyExists")
        self.objects[name] = {**body, "status": {}}

    def delete_namespaced_custom_object(self, group: str, version: str, namespace: str, plural: str,
                                        name: str) -> None:
        if self.refuse_deletes:
            raise ApiException(status=500, reason="etcdserver: request timed out")
        self.objects.pop(name)
        self.deleted.append(name)

    def get_namespaced_custom_object(self, group: str, version: str, namespace: str, plural: str,
                                     name: str) -> dict[str, Any]:
        return self.objects[name]

    def list_namespaced_custom_object(self, group: str, version: str, namespace: str, plural: str,
                                      label_selector: str) -> dict[str, Any]:
        return {"items": [o for o in self.objects.values() if o["spec"]["pipeline"] == "p"]}


def request(api: CheckpointApi, name: str, backoff_limit: int = 1) -> dict[str, Any]:
    obj = {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}"},
           "spec": {"pipeline": "p", "backoffLimit": backoff_limit}, "status": {"state": "Pending"}}
    api.objects[name] = obj
    return obj


def snapshots() -> tuple[Snapshots, CheckpointApi, list[tuple[str, str, str]], Clock]:
    api, events, clock = CheckpointApi(), [], Clock()
    s = Snapshots("ns", "p", api, lambda obj, kind, reason, msg: events.append((obj["metadata"]["name"], reason, msg)),
                  clock)  # type: ignore[arg-type]
    return s, api, events, clock


def info(epoch: int, boundary: int, kept: list[int]) -> dict[str, Any]:
    return {"epoch": epoch, "boundary": boundary, "bytes": 4096, "seconds": 0.2, "kept": kept}


def test_a_request_is_asked_once_committed_by_the_next_checkpoint_and_pinned() -> None:
    s, api, events, _ = snapshots()
    s.accept(request(api, "before-migration"))
    assert s.due() and not s.due()  # asked once: InProgress until a checkpoint commits
    assert api.objects["before-migration"]["status"]["state"] == "InProgress"
    s.committed(info(3, 30, kept=[2, 3]), "pipeline-uid")
    status = api.objects["before-migration"]["status"]
    assert (status["state"], status["epoch"], status["step"], status["bytes"]) == ("Committed", 3, 30, 4096)
    assert status["pipelineUid"] == "pipeline-uid"
    assert s.pinned_epochs() == {3} and not s.waiting
    assert [e[1] for e in events] == ["Committed"]
    assert set(api.objects) == {"before-migration"}  # it answered the checkpoint: no record of it besides
    s.forget("before-migration")
    assert s.pinned_epochs() == set()


def test_periodic_checkpoints_get_records_that_retention_deletes() -> None:
    s, api, _, _ = snapshots()
    s.committed(info(1, 10, kept=[1]), "uid")
    s.committed(info(2, 20, kept=[1, 2]), "uid")
    assert {n: o["status"]["step"] for n, o in api.objects.items()} == {"p-1": 10, "p-2": 20}
    record = api.objects["p-1"]
    assert record["spec"] == {"pipeline": "p", "alreadyExists": True}
    assert record["metadata"]["ownerReferences"][0]["uid"] == "uid"
    s.committed(info(3, 30, kept=[2, 3]), "uid")
    assert set(api.objects) == {"p-2", "p-3"} and api.deleted == ["p-1"]
    # another operator (after a restart) lists the records once and goes on deleting them
    again, _, _, _ = snapshots()
    again.custom = api  # type: ignore[assignment]
    again.committed(info(4, 40, kept=[3, 4]), "uid")
    assert set(api.objects) == {"p-3", "p-4"}


def test_an_aborted_checkpoint_is_retried_after_a_backoff_then_failed_with_an_event() -> None:
    s, api, events, clock = snapshots()
    s.accept(request(api, "c", backoff_limit=1))
    assert s.due()
    s.failed("checkpoint 4 aborted: worker w1 lost")
    status = api.objects["c"]["status"]
    assert status["state"] == "Pending" and status["failures"] == 1 and "retry 1 of 1" in status["message"]
    assert not s.due()  # backing off
    clock.now += 2.0
    assert s.due()
    s.failed("checkpoint 5 aborted: storage read-only")
    status = api.objects["c"]["status"]
    assert status["state"] == "Failed" and "storage read-only" in status["message"]
    assert "backoffLimit 1 spent" in status["message"]
    assert [e[1] for e in events] == ["CheckpointFailed"] and not s.waiting


def test_a_request_not_yet_asked_is_untouched_by_an_abort_but_fails_when_the_pipeline_ends() -> None:
    s, api, events, _ = snapshots()
    s.accept(request(api, "c"))
    s.failed("checkpoint 4 aborted")  # a periodic one: not what was asked for
    assert api.objects["c"]["status"]["state"] == "Pending" and s.waiting
    s.failed("the pipeline stopped", ended=True)
    assert api.objects["c"]["status"]["state"] == "Failed" and [e[1] for e in events] == ["CheckpointFailed"]


def test_an_interrupted_run_asks_again_and_a_committed_request_found_at_start_is_pinned() -> None:
    s, api, _, _ = snapshots()
    s.accept(request(api, "c"))
    assert s.due()
    s.interrupted()
    assert s.due()
    found = request(api, "old")
    found["status"] = {"state": "Committed", "epoch": 7}
    s.accept(found)
    assert s.pinned_epochs() == {7}


def test_a_restore_fails_the_named_checkpoints_it_deleted_and_keeps_the_older_ones() -> None:
    s, api, _, _ = snapshots()
    for name, epoch in (("old", 2), ("new", 5)):
        obj = request(api, name)
        obj["status"] = {"state": "Committed", "epoch": epoch}
        s.accept(obj)
    s.discarded_after(3, "deleted by the restore of p from checkpoint 3")
    assert s.pinned_epochs() == {2}
    assert api.objects["new"]["status"]["state"] == "Failed" and "restore" in api.objects["new"]["status"]["message"]
    assert api.objects["old"]["status"]["state"] == "Committed"


def test_a_record_never_takes_over_an_object_of_its_name_and_a_refused_delete_is_tried_again() -> None:
    s, api, _, _ = snapshots()
    mine = request(api, "p-1")  # someone named their checkpoint as a record would be named
    s.committed(info(1, 10, kept=[1]), "uid")
    assert api.objects["p-1"] is mine and mine["status"] == {"state": "Pending"}
    s.committed(info(2, 20, kept=[1, 2]), "uid")
    api.refuse_deletes = True
    s.committed(info(3, 30, kept=[2, 3]), "uid")
    assert "p-2" in api.objects  # not deleted yet: the API server refused
    api.refuse_deletes = False
    s.committed(info(4, 40, kept=[3, 4]), "uid")
    assert set(api.objects) == {"p-1", "p-3", "p-4"}


def test_a_new_request_is_written_pending_before_it_can_be_asked() -> None:
    s, api, _, _ = snapshots()
    obj = request(api, "c")
    obj["status"] = {}
    s.accept(obj)
    assert api.objects["c"]["status"]["state"] == "Pending"
    assert s.due() and api.objects["c"]["status"]["state"] == "InProgress"


def test_a_restore_deletes_the_records_of_the_checkpoints_after_it() -> None:
    s, api, _, _ = snapshots()
    for epoch in (1, 2, 3):
        s.committed(info(epoch, epoch * 10, kept=[1, 2, 3]), "uid")
    s.discarded_after(1, "deleted by the restore")
    assert set(api.objects) == {"p-1"}
