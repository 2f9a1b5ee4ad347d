"""Operator replicas: the one that started first has the highest priority; two never tie."""

from __future__ import annotations

from ftpipeline_operator.peering import priority


def test_an_older_replica_outranks_a_younger_one_whatever_their_tie_breaks() -> None:
    assert priority(1_800_000_000, 0) > priority(1_800_000_001, 999)
    assert priority(1_800_000_000, 5) != priority(1_800_000_000, 6)
    assert priority(1_800_000_000, 0) > 0
