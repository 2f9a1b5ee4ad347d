"""Planning a step's source offsets from the workers' reports (coordinator/offsets.py)."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from ftpipeline.coordinator.offsets import SourceOffsets, shares
from ftpipeline.dataflow.graph import Graph
from ftpipeline.lineage.naming import Channel, Slot
from ftpipeline.spec.load import parse_pipeline


def graph(source: str) -> Graph:
    text = f"""
apiVersion: ftpipeline.io/v1alpha1
kind: FTPipeline
metadata: {{name: o}}
spec:
  entryPoint: m.py
  workers: 2
  stages:
    - {{name: in, parallelism: 2, source: {source}}}
    - {{name: out, parallelism: 2, inputs: [{{stage: in}}], sink: {{parquet: {{path: o}}}}}}
"""
    return Graph.physical(parse_pipeline(text, Path("/tmp"), check_entry_point=False))


FILES = "{file: {path: d, format: jsonl, rowsPerStep: 10, schema: {k: string}}}"
KAFKA = "{kafka: {topic: t, schema: {k: string}, maxRecordsPerStep: 100}}"
KAFKA_ALL = "{kafka: {topic: t, schema: {k: string}}}"


def test_a_file_step_waits_for_every_channel_and_reads_its_share() -> None:
    o = SourceOffsets(graph(FILES))
    o.received(Slot("in", 0), 0, 50, False)
    plan = o.plan()
    assert not plan.reported  # channel 1 has not reported
    o.received(Slot("in", 1), 0, 3, True)
    plan = o.plan()
    assert plan.reported and not plan.exhausted
    assert plan.offsets == {Slot("in", 0): (0, 5), Slot("in", 1): (0, 3)}


def test_a_kafka_step_reads_what_each_partition_reported_and_a_stale_one_reads_nothing() -> None:
    o = SourceOffsets(graph(KAFKA_ALL))
    assert not o.plan().reported  # no reader has listed the topic yet: the run cannot be over
    for p, (start, n) in enumerate([(10, 5), (0, 7), (3, 0)]):
        o.received(Slot("in", p), start, n, False)
    plan = o.plan()
    assert plan.reported and not plan.exhausted
    assert plan.offsets == {Slot("in", 0): (10, 15), Slot("in", 1): (0, 7), Slot("in", 2): (3, 3)}
    o.recorded(plan.offsets)
    # partition 1's worker has not looked again since: its old report is stale and holds nothing back
    o.received(Slot("in", 0), 15, 2, False)
    o.received(Slot("in", 3), 0, 4, False)  # a partition added at run time joins
    plan = o.plan()
    assert plan.offsets == {Slot("in", 0): (15, 17), Slot("in", 1): (7, 7), Slot("in", 2): (3, 3),
                            Slot("in", 3): (0, 4)}
    assert o.lag() == {Slot("in", 0): 2, Slot("in", 1): 0, Slot("in", 2): 0, Slot("in", 3): 4}


def test_max_records_per_step_is_shared_by_backlog() -> None:
    o = SourceOffsets(graph(KAFKA))
    o.received(Slot("in", 0), 0, 300, False)
    o.received(Slot("in", 1), 0, 100, False)
    o.received(Slot("in", 2), 0, 0, False)
    assert o.plan().offsets == {Slot("in", 0): (0, 75), Slot("in", 1): (0, 25), Slot("in", 2): (0, 0)}


def test_a_bounded_kafka_read_ends_when_every_partition_is_at_its_end() -> None:
    o = SourceOffsets(graph(KAFKA_ALL))
    o.found(Channel("in", 0), [0])
    o.found(Channel("in", 1), [1])
    o.received(Slot("in", 0), 5, 0, True)
    o.received(Slot("in", 1), 2, 1, False)
    assert not o.plan().exhausted
    o.received(Slot("in", 1), 2, 0, True)
    assert o.plan().exhausted


def test_an_empty_partition_reported_first_does_not_end_the_topic() -> None:
    """Partition 1 (channel 1) is empty and its worker reports first; channel 0 (partitions 0 and 2) has
    not looked yet: the run must not end with nothing read."""
    o = SourceOffsets(graph(KAFKA_ALL.replace("schema", "endingOffsets: latest, schema")))
    o.found(Channel("in", 1), [1])
    o.received(Slot("in", 1), 0, 0, True)
    plan = o.plan()
    assert plan.reported and not plan.exhausted and plan.rows == 0
    assert o.steps_left() is None
    o.found(Channel("in", 0), [0, 2])
    o.received(Slot("in", 0), 0, 7, True)
    assert not o.plan().exhausted  # partition 2 listed, not reported yet
    o.received(Slot("in", 2), 0, 3, True)
    plan = o.plan()
    assert not plan.exhausted and plan.offsets == {Slot("in", 0): (0, 7), Slot("in", 1): (0, 0), Slot("in", 2): (0, 3)}
    assert o.steps_left() == 1
    o.recorded(plan.offsets)
    for p, end in ((0, 7), (1, 0), (2, 3)):
        o.received(Slot("in", p), end, 0, True)
    assert o.plan().exhausted


def test_a_channel_with_no_partition_lists_none_and_the_topic_still_ends() -> None:
    o = SourceOffsets(graph(KAFKA_ALL))  # one partition, two channels: channel 1 reads nothing
    o.found(Channel("in", 0), [0])
    o.received(Slot("in", 0), 4, 0, True)
    assert not o.plan().exhausted
    o.found(Channel("in", 1), [])
    assert o.plan().exhausted


def test_a_rollback_forgets_reports_and_restarts_from_the_cut() -> None:
    o = SourceOffsets(graph(KAFKA_ALL))
    o.received(Slot("in", 0), 9, 1, False)
    o.reset({Slot("in", 0): 4})
    plan = o.plan()
    assert not plan.reported
    assert plan.offsets == {Slot("in", 0): (4, 4)}


@given(st.dictionaries(st.integers(0, 20), st.integers(0, 10_000), min_size=1, max_size=12), st.integers(1, 5000))
def test_shares_never_exceed_the_limit_or_a_backlog_and_use_what_they_can(backlog: dict[int, int], limit: int) -> None:
    slots = {Slot("in", p): n for p, n in backlog.items()}
    got = shares(slots, limit)
    assert all(0 <= got[s] <= n for s, n in slots.items())
    assert sum(got.values()) == min(limit, sum(slots.values()))
    assert got == shares(dict(reversed(list(slots.items()))), limit)  # the order of reports does not matter


def test_a_directory_read_to_its_end_knows_its_steps_left_once_every_channel_reported() -> None:
    o = SourceOffsets(graph(FILES))  # 10 rows a step: 5 per channel
    o.received(Slot("in", 0), 0, 23, False)
    assert o.steps_left() is None  # channel 1 has not reported
    o.received(Slot("in", 1), 0, 7, False)
    assert o.steps_left() == 5  # channel 0: 23 rows at 5 a step
    o.recorded(o.plan().offsets)
    assert o.steps_left() == 4
    assert SourceOffsets(graph(FILES.replace("rowsPerStep: 10", "rowsPerStep: 10, follow: true"))).steps_left() is None


def test_a_topic_knows_its_steps_left_only_when_read_to_its_end() -> None:
    bounded = SourceOffsets(graph(KAFKA.replace("maxRecordsPerStep", "endingOffsets: latest, maxRecordsPerStep")))
    bounded.found(Channel("in", 0), [0])
    bounded.found(Channel("in", 1), [1])
    bounded.received(Slot("in", 0), 0, 250, False)
    bounded.received(Slot("in", 1), 0, 120, False)
    assert bounded.steps_left() == 4  # 370 records at 100 a step
    endless = SourceOffsets(graph(KAFKA))
    endless.received(Slot("in", 0), 0, 250, False)
    assert endless.steps_left() is None


def test_a_channel_with_nothing_left_to_read_is_finished() -> None:
    """What holds no watermark back: a directory's channel read to its end (or with no file of its own), a
    bounded topic's channel whose partitions are at their ends, a topic's channel with no partition."""
    o = SourceOffsets(graph(FILES))
    o.received(Slot("in", 0), 0, 50, True)
    o.received(Slot("in", 1), 0, 0, True)  # no file of its own
    assert o.finished() == {Channel("in", 1)}
    o.recorded({Slot("in", 0): (0, 50)})
    assert o.finished() == {Channel("in", 1)}  # its report is from before the step: not known yet
    o.received(Slot("in", 0), 50, 0, True)
    assert o.finished() == {Channel("in", 0), Channel("in", 1)}
    topic = SourceOffsets(graph(KAFKA_ALL))
    topic.found(Channel("in", 0), [0])
    topic.received(Slot("in", 0), 4, 3, True)
    assert topic.finished() == set()  # channel 1 has not listed its partitions
    topic.found(Channel("in", 1), [])
    assert topic.finished() == {Channel("in", 1)}
    unbounded = SourceOffsets(graph(KAFKA))
    unbounded.found(Channel("in", 0), [0])
    unbounded.received(Slot("in", 0), 4, 0, False)  # at its end, but more may come
    assert unbounded.finished() == set()
