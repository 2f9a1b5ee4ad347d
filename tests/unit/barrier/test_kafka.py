"""A sink channel's GT_last read: a group coordinator that is not ready yet is asked again; a refusal is not;
an error the broker put on the partition alone is never read as offset 0."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import OFFSET_INVALID, KafkaError, KafkaException, TopicPartition

from ftpipeline.barrier import kafka
from ftpipeline.barrier.kafka import _Channel


@dataclass
class _Answer:
    """A partition in ``committed``'s answer: confluent-kafka's TopicPartition, whose error cannot be set."""
    offset: int
    error: KafkaError | None = None


class _Group:
    """A consumer whose ``committed`` fails with ``errors`` in turn (the call's, or with ``on_partition``
    the partition's, which librdkafka returns with an invalid offset), then answers ``offset``."""

    def __init__(self, errors: list[int], offset: int, on_partition: bool = False) -> None:
        self.errors, self.offset, self.on_partition, self.asked = errors, offset, on_partition, 0

    def committed(self, partitions: list[TopicPartition], timeout: float) -> list[_Answer]:
        self.asked += 1
        if self.errors and not self.on_partition:
            raise KafkaException(KafkaError(self.errors.pop(0)))
        if self.errors:
            return [_Answer(OFFSET_INVALID, KafkaError(self.errors.pop(0)))]
        return [_Answer(self.offset)]


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


def test_an_offset_of_a_transaction_still_open_is_waited_for_not_read_as_zero(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """After a broker restart the group's offset can belong to a transaction its producer left open: the
    partition answers UNSTABLE_OFFSET_COMMIT with an invalid offset, which must not pass for "nothing
    released" (a replay would then release step 1 again)."""
    monkeypatch.setattr(kafka.time, "sleep", lambda _: None)
    group = _Group([KafkaError.UNSTABLE_OFFSET_COMMIT] * 3, 7, on_partition=True)
    assert _channel(group).gt_last() == 7
    assert group.asked == 4


def test_a_refusal_on_the_partition_is_raised_not_read_as_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kafka.time, "sleep", lambda _: None)
    group = _Group([KafkaError.TOPIC_AUTHORIZATION_FAILED], 7, on_partition=True)
    with pytest.raises(KafkaException, match="TOPIC_AUTHORIZATION_FAILED"):
        _channel(group).gt_last()
    assert group.asked == 1
