"""A pipeline's object writes: each object once per content, side by side, every failure waited out."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from ftpipeline_operator.owned import OwnedObjects


def obj(kind: str, name: str, value: str = "a", namespace: str = "ns") -> dict[str, Any]:
    return {"kind": kind, "metadata": {"name": name, "namespace": namespace}, "data": {"v": value}}


def test_an_object_sent_unchanged_before_is_not_sent_again() -> None:
    sent: list[str] = []
    owned = OwnedObjects(lambda o: sent.append(f"{o['kind']}/{o['metadata']['name']}/{o['data']['v']}"))
    assert owned.apply([obj("ConfigMap", "p-pipeline"), obj("Service", "p-workers")]) == 2
    assert owned.apply([obj("ConfigMap", "p-pipeline", "b"), obj("Service", "p-workers")]) == 1
    assert sorted(sent) == ["ConfigMap/p-pipeline/a", "ConfigMap/p-pipeline/b", "Service/p-workers/a"]
    # the same name in another namespace is another object
    assert owned.apply([obj("Service", "p-workers", namespace="other")]) == 1


def test_the_objects_of_one_pipeline_are_sent_side_by_side() -> None:
    barrier = threading.Barrier(3, timeout=5)  # passes only when all three requests are in flight at once
    owned = OwnedObjects(lambda o: barrier.wait())
    assert owned.apply([obj("ConfigMap", "p-pipeline"), obj("Service", "p-workers"),
                        obj("NetworkPolicy", "p-workers")]) == 3


def test_a_failed_write_is_raised_and_sent_again_next_time_while_the_others_are_remembered() -> None:
    fail = {"Service"}
    sent: list[str] = []

    def send(o: dict[str, Any]) -> None:
        if o["kind"] in fail:
            raise RuntimeError(f"{o['kind']} refused")
        sent.append(o["kind"])

    owned = OwnedObjects(send)
    with pytest.raises(RuntimeError, match="Service refused"):
        owned.apply([obj("ConfigMap", "p-pipeline"), obj("Service", "p-workers")])
    fail.clear()
    assert owned.apply([obj("ConfigMap", "p-pipeline"), obj("Service", "p-workers")]) == 1
    assert sent == ["ConfigMap", "Service"]


def test_a_deleted_pipelines_objects_are_sent_again_when_it_is_created_anew() -> None:
    owned = OwnedObjects(lambda o: None)
    owned.apply([obj("ConfigMap", "p-pipeline"), obj("ConfigMap", "q-pipeline")])
    owned.forget("ns", "p")
    assert owned.apply([obj("ConfigMap", "p-pipeline"), obj("ConfigMap", "q-pipeline")]) == 1
