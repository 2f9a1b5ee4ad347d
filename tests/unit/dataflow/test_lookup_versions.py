"""What a step records of a compacted Kafka topic it joins (``dataflow/lookup_kafka.py``): each partition's end,
as text that reads back the same; and what the coordinator makes of the workers' reports (``TableVersions``)."""

from __future__ import annotations

import pytest

from ftpipeline.dataflow.lookup import TableVersions
from ftpipeline.dataflow.lookup_kafka import ends_of, version
from ftpipeline.spec.model import KafkaSource, LookupOp, StageKind, StageSpec


def test_a_version_lists_each_partitions_end_in_order_and_reads_back() -> None:
    text = version({10: 5, 2: 0, 0: 1234})
    assert text == "kafka:0=1234,2=0,10=5"
    assert ends_of(text) == {0: 1234, 2: 0, 10: 5}
    assert ends_of(version({})) == {}
    with pytest.raises(ValueError, match="not a Kafka table's version"):
        ends_of("17")


def _stage(name: str, kafka: bool) -> StageSpec:
    op = LookupOp("inner", ("ad",), kafka=KafkaSource("ads", schema=(("ad", "string"),))) if kafka else \
        LookupOp("inner", ("ad",), parquet="/nowhere")
    return StageSpec(name=name, kind=StageKind.LOOKUP, parallelism=1, lookup=op)


def test_no_step_starts_before_each_kafka_table_was_reported_and_an_end_never_goes_back() -> None:
    versions = TableVersions([_stage("a", True), _stage("b", True)])
    assert not versions.ready()
    versions.reported("a", {0: 10, 1: 4})
    assert not versions.ready()
    versions.reported("b", {0: 3})
    versions.reported("elsewhere", {0: 99})  # a stage it does not know: nothing
    assert versions.ready()
    versions.reported("a", {0: 8, 1: 6})      # a late report of partition 0: its end stays
    assert versions.now() == {"a": "kafka:0=10,1=6", "b": "kafka:0=3"}
    versions.reported("a", {2: 1})            # a partition added
    assert versions.now()["a"] == "kafka:0=10,1=6,2=1"


def test_a_pipeline_with_no_kafka_table_is_ready_at_once() -> None:
    assert TableVersions([_stage("p", False)]).ready()
