"""spec.restoreFrom names a checkpoint; only a committed one of this very pipeline is restored."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from ftpipeline_operator.restores import Refused, Restore, asked, done_in, resolve


class Objects:
    def __init__(self, **objects: dict[str, Any]) -> None:
        self.objects = objects

    def get_namespaced_custom_object(self, group: str, version: str, namespace: str, plural: str,
                                     name: str) -> dict[str, Any]:
        if name not in self.objects:
            raise ApiException(status=404, reason="Not Found")
        return self.objects[name]


PIPELINE = {"metadata": {"namespace": "ns", "name": "p", "uid": "u1"}, "spec": {"restoreFrom": {"checkpoint": "c"}}}


def checkpoint(pipeline: str = "p", state: str = "Committed", uid: str = "u1") -> dict[str, Any]:
    return {"spec": {"pipeline": pipeline}, "status": {"state": state, "epoch": 4, "step": 40, "pipelineUid": uid}}


def test_a_committed_checkpoint_of_this_pipeline_resolves_to_its_epoch() -> None:
    want = asked(PIPELINE, None)
    assert want == Restore("c", "")
    assert resolve(Objects(c=checkpoint()), PIPELINE, want) == Restore("c", "", 4, 40)  # type: ignore[arg-type]


@pytest.mark.parametrize(("objects", "says"), [
    ({}, "does not exist"),
    ({"c": checkpoint(pipeline="other")}, "is a checkpoint of other, not of p"),
    ({"c": checkpoint(state="InProgress")}, "is InProgress, not Committed"),
    ({"c": checkpoint(uid="u0")}, "earlier pipeline named p"),
])
def test_anything_else_is_refused_naming_the_field(objects: dict[str, Any], says: str) -> None:
    with pytest.raises(Refused) as refused:
        resolve(Objects(**objects), PIPELINE, Restore("c", ""))  # type: ignore[arg-type]
    assert says in str(refused.value) and "spec.restoreFrom.checkpoint" in str(refused.value)


def test_a_restore_is_done_once_per_checkpoint_and_nonce() -> None:
    done = done_in(Restore("c", "").status("Restored"))
    assert done == ("c", "") and asked(PIPELINE, done) is None
    again = {**PIPELINE, "spec": {"restoreFrom": {"checkpoint": "c", "nonce": "2"}}}
    assert asked(again, done) == Restore("c", "2")
    assert asked({"spec": {}}, None) is None
