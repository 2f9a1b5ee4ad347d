"""The Kafka source on a real broker: ranges read exactly, committed records only, bad values to dead letters."""

from __future__ import annotations

import json

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewPartitions

from ftpipeline.dataflow.sources.kafka import KafkaSourceError, KafkaSourceReader
from ftpipeline.kafka.topics import create_topics, produce
from ftpipeline.spec.model import KafkaSource

SCHEMA = (("user", "string"), ("n", "long"))


def reader(bootstrap: str, topic: str, parallelism: int = 2, **kw: object) -> KafkaSourceReader:
    return KafkaSourceReader(KafkaSource(topic, schema=SCHEMA, **kw), parallelism, bootstrap)  # type: ignore[arg-type]


def fill(bootstrap: str, topic: str, partition: int, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for v in values:
        producer.produce(topic, value=v, partition=partition)
    producer.flush(30)


def test_a_range_reads_the_same_records_every_time_and_bad_values_are_dead_letters(kafka_bootstrap: str,
                                                                                     topic_name: str) -> None:
    create_topics(kafka_bootstrap, {topic_name: 3})
    values = [json.dumps({"user": f"u{i}", "n": i}).encode() for i in range(10)]
    values[4] = b"not json"
    values[7] = b'{"user": "u7", "n": "seven"}'
    fill(kafka_bootstrap, topic_name, 1, values)
    r = reader(kafka_bootstrap, topic_name)
    assert r.slots(0) == [0, 2] and r.slots(1) == [1]
    assert r.first_offset(1, fresh=True) == 0 and r.available(1, 0) == 10
    first = r.read(1, 1, 2, 9)
    assert first.table.column("n").to_pylist() == [2, 3, 5, 6, 8]
    assert [(d.location, d.reason.split(":")[0]) for d in first.dead_letters] == [
        (f"{topic_name}/1@4", "not valid JSON"), (f"{topic_name}/1@7", "field 'n'")]
    again = reader(kafka_bootstrap, topic_name).read(1, 1, 2, 9)  # another process, after a failure
    assert again.table.equals(first.table) and again.dead_letters == first.dead_letters
    assert r.read(1, 1, 5, 5).table.num_rows == 0
    assert r.empty().schema.names == ["user", "n"]


def test_aborted_transactions_take_offsets_but_are_never_read(kafka_bootstrap: str, topic_name: str) -> None:
    create_topics(kafka_bootstrap, {topic_name: 1})
    p = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": f"{topic_name}-x"})
    p.init_transactions(30)
    for commit in (True, False, True):
        p.begin_transaction()
        for i in range(3):
            p.produce(topic_name, value=json.dumps({"user": "c" if commit else "a", "n": i}).encode())
        (p.commit_transaction if commit else p.abort_transaction)(30)
    r = reader(kafka_bootstrap, topic_name, parallelism=1)
    end = r.available(0, 0)
    assert end is not None and end > 6  # the aborted records and three markers take offsets too
    table = r.read(0, 1, 0, end).table
    assert table.column("user").to_pylist() == ["c"] * 6


def test_starting_offsets_and_a_bounded_read(kafka_bootstrap: str, topic_name: str) -> None:
    create_topics(kafka_bootstrap, {topic_name: 1})
    fill(kafka_bootstrap, topic_name, 0, [json.dumps({"user": "x", "n": i}).encode() for i in range(5)])
    assert reader(kafka_bootstrap, topic_name, starting="latest").first_offset(0, fresh=True) == 5
    # a partition that appears in a running pipeline starts at its beginning, whatever the starting offsets
    assert reader(kafka_bootstrap, topic_name, starting="latest").first_offset(0, fresh=False) == 0
    assert reader(kafka_bootstrap, topic_name, starting="timestamp",
                  starting_timestamp_ms=2**62).first_offset(0, fresh=True) == 5
    bounded = reader(kafka_bootstrap, topic_name, ending="latest")
    assert not bounded.exhausted(0, 0) and bounded.available(0, 0) == 5
    fill(kafka_bootstrap, topic_name, 0, [json.dumps({"user": "late", "n": 0}).encode()])
    assert bounded.available(0, 0) == 5 and bounded.exhausted(0, 5)  # its end was taken when it began
    assert reader(kafka_bootstrap, topic_name).available(0, 0) == 6


def test_partitions_added_at_run_time_are_listed_again(kafka_bootstrap: str, topic_name: str,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    import ftpipeline.dataflow.sources.kafka as module

    monkeypatch.setattr(module, "LIST_EVERY_S", 0.0)
    create_topics(kafka_bootstrap, {topic_name: 2})
    r = reader(kafka_bootstrap, topic_name)
    assert r.slots(0) == [0]
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    for future in admin.create_partitions([NewPartitions(topic_name, 4)]).values():
        future.result(30)
    assert r.slots(0) == [0, 2] and r.slots(1) == [1, 3]


def test_a_missing_topic_and_a_range_gone_are_errors_that_name_them(kafka_bootstrap: str, topic_name: str) -> None:
    with pytest.raises(KafkaSourceError, match=f"topic '{topic_name}'"):
        reader(kafka_bootstrap, topic_name).slots(0)
    create_topics(kafka_bootstrap, {topic_name: 1})
    produce(kafka_bootstrap, topic_name, [json.dumps({"user": "x", "n": i}).encode() for i in range(4)])
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    from confluent_kafka import TopicPartition

    for future in admin.delete_records([TopicPartition(topic_name, 0, 3)]).values():
        future.result(30)
    with pytest.raises(KafkaSourceError, match=rf"{topic_name}/0 offsets \[0, 2\): no longer in the topic"):
        reader(kafka_bootstrap, topic_name, parallelism=1).read(0, 1, 0, 2)
