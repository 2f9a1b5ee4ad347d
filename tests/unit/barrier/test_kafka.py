"""A sink channel's GT_last read: a group coordinator that is not ready yet is asked again; a refusal is not."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from ftpipeline.barrier import kafka
from ftpipeline.barrier.kafka import _Channel


class _Group:
    """A consumer whose ``committed`` fails with ``errors`` in turn, then answers ``offset``."""

    def __init__(self, errors: list[int], offset: int) -> None:
        self.errors, self.offset, self.asked = errors, offset, 0

    def committed(self, partitions: list[TopicPartition], timeout: float) -> list[TopicPartition]:
        self.asked += 1
        if self.errors:
            raise KafkaException(KafkaError(self.errors.pop(0)))
        return [TopicPartition(partitions[0].topic, 0, self.offset)]


def _channel(group: _Group) -> Any:
    channel = _Channel.__new__(_Channel)
    channel.name, channel.topic, channel.group = "g", "t", group
    return channel


def test_a_coordinator_not_ready_yet_is_asked_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kafka.time, "sleep", lambda _: None)
    group = _Group([KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS], 7)
    assert _channel(group).gt_last() == 7
    assert group.asked == 3


def test_a_refusal_is_raised_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kafka.time, "sleep", lambda _: None)
    group = _Group([KafkaError.GROUP_AUTHORIZATION_FAILED], 7)
    with pytest.raises(KafkaException):
        _channel(group).gt_last()
    assert group.asked == 1


def test_a_coordinator_away_too_long_is_the_callers_to_wait_out(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = iter(range(0, 1000, 10))
    monkeypatch.setattr(kafka.time, "sleep", lambda _: None)
    monkeypatch.setattr(kafka.time, "monotonic", lambda: float(next(clock)))
    group = _Group([KafkaError.NOT_COORDINATOR] * 50, 7)
    with pytest.raises(KafkaException):
        _channel(group).gt_last()
    assert 2 <= group.asked < 50
