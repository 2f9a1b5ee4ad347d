"""Operator replicas: the one that started first has the highest priority; two never tie; the peering
object is owned by the release."""

from __future__ import annotations

from typing import Any, cast

from kubernetes import client

from ftpipeline_operator.peering import ensure_peering_object, priority


def test_an_older_replica_outranks_a_younger_one_whatever_their_tie_breaks() -> None:
    assert priority(1_800_000_000, 0) > priority(1_800_000_001, 999)
    assert priority(1_800_000_000, 5) != priority(1_800_000_000, 6)
    assert priority(1_800_000_000, 0) > 0


class FakeCustom:
    """The three calls ensure_peering_object makes, on one stored object (a fake: the point is the logic)."""

    def __init__(self, existing: dict[str, Any] | None = None) -> None:
        self.obj = existing
        self.patches: list[dict[str, Any]] = []

    def create_cluster_custom_object(self, group: str, version: str, plural: str, body: dict[str, Any]) -> None:
        if self.obj is not None:
            raise client.exceptions.ApiException(status=409)
        self.obj = body

    def get_cluster_custom_object(self, group: str, version: str, plural: str, name: str) -> dict[str, Any]:
        assert self.obj is not None
        return self.obj

    def patch_cluster_custom_object(self, group: str, version: str, plural: str, name: str, body: dict[str, Any],
                                    **_: Any) -> None:
        self.patches.append(body)


OWNER = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "name": "ftp", "uid": "u-1"}


def test_the_peering_object_is_made_owned_by_the_release() -> None:
    api = FakeCustom()
    ensure_peering_object(cast(Any, api), "ns.ftp", OWNER)
    assert api.obj is not None and api.obj["metadata"] == {"name": "ns.ftp", "ownerReferences": [OWNER]}


def test_one_made_without_an_owner_gets_it_and_one_with_an_owner_is_left_alone() -> None:
    orphan = FakeCustom({"metadata": {"name": "ns.ftp"}})
    ensure_peering_object(cast(Any, orphan), "ns.ftp", OWNER)
    assert orphan.patches == [{"metadata": {"ownerReferences": [OWNER]}}]
    owned = FakeCustom({"metadata": {"name": "ns.ftp", "ownerReferences": [OWNER]}})
    ensure_peering_object(cast(Any, owned), "ns.ftp", OWNER)
    assert owned.patches == []
