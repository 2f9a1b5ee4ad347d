"""Names of channels, edges, objects and tasks: string forms, JSON form, ids and step ranges."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ftpipeline.lineage.naming import Channel, EdgeKey, ObjectName, Task, TaskKind

# DNS labels, as the schema allows for stage names: may contain '-', never '.'.
stage_names = st.from_regex(r"\A[a-z0-9]([-a-z0-9]{0,10}[a-z0-9])?\Z")
numbers = st.integers(0, 10_000)


@given(stage_names, numbers)
def test_channel_round_trip(stage: str, index: int) -> None:
    ch = Channel(stage, index)
    assert Channel.parse(ch.key()) == ch


@given(stage_names, numbers, stage_names, st.integers(0, 2), numbers)
def test_edge_key_round_trip(actor: str, channel: int, target: str, pf: int, tc: int) -> None:
    edge = EdgeKey(actor, channel, target, pf, tc)
    assert EdgeKey.parse(edge.key()) == edge


@given(stage_names, numbers, numbers, stage_names, st.integers(0, 2), numbers)
def test_object_name_round_trip(actor: str, channel: int, seq: int, target: str, pf: int, tc: int) -> None:
    name = ObjectName(actor, channel, seq, target, pf, tc)
    assert ObjectName.parse(name.key()) == name


def test_keys_with_dashed_stage_names() -> None:
    assert Channel("per-user", 2).key() == "per-user.2"
    assert Channel.parse("per-user.2") == Channel("per-user", 2)
    name = ObjectName("clean-v2", 1, 17, "per-user", 1, 0)
    assert name.key() == "clean-v2.1.17.per-user.1.0"
    assert ObjectName.parse("clean-v2.1.17.per-user.1.0") == name
    assert EdgeKey.parse("clean-v2.1.per-user.1.0") == EdgeKey("clean-v2", 1, "per-user", 1, 0)


def test_object_name_parts() -> None:
    name = ObjectName("clean", 1, 17, "agg", 1, 2)
    assert name.edge == EdgeKey("clean", 1, "agg", 1, 2)
    assert name.producer == Channel("clean", 1)
    assert name.consumer == Channel("agg", 2)


def test_objects_of_one_edge_share_the_edge_key() -> None:
    a = ObjectName("clean", 1, 3, "agg", 1, 2)
    b = ObjectName("clean", 1, 4, "agg", 1, 2)
    assert a.edge == b.edge
    assert a.key() != b.key()


def test_channel_ordering() -> None:
    assert sorted([Channel("b", 0), Channel("a", 10), Channel("a", 2)]) == [
        Channel("a", 2),
        Channel("a", 10),
        Channel("b", 0),
    ]


# -- tasks ----------------------------------------------------------------------


def test_task_first_defaults_to_step() -> None:
    task = Task(TaskKind.TRANSFORM, "clean", 0, 7)
    assert task.first == 7
    assert task.steps == range(7, 8)
    assert task.ref == Channel("clean", 0)


def test_rebuild_task_steps_span_first_to_step() -> None:
    task = Task(TaskKind.REBUILD, "agg", 1, 5, first=1)
    assert list(task.steps) == [1, 2, 3, 4, 5]


def test_rebuild_task_of_zero_steps_is_empty() -> None:
    task = Task(TaskKind.REBUILD, "agg", 1, 0, first=1)
    assert list(task.steps) == []


def test_task_id_form() -> None:
    assert Task(TaskKind.SOURCE, "events", 2, 9).id == "source:events.2:9@0"
    assert Task(TaskKind.REBUILD, "per-user", 0, 4, first=1, epoch=3).id == "rebuild:per-user.0:1-4@3"


def test_task_ids_distinct_for_epoch_first_and_step() -> None:
    tasks = [
        Task(TaskKind.AGGREGATE, "agg", 0, 3),
        Task(TaskKind.AGGREGATE, "agg", 0, 4),
        Task(TaskKind.AGGREGATE, "agg", 0, 3, epoch=1),
        Task(TaskKind.AGGREGATE, "agg", 0, 3, epoch=2),
        Task(TaskKind.REBUILD, "agg", 0, 3, first=1),
        Task(TaskKind.REBUILD, "agg", 0, 3, first=2),
        Task(TaskKind.REBUILD, "agg", 0, 4, first=1),
        Task(TaskKind.REBUILD, "agg", 0, 3, first=1, epoch=1),
        Task(TaskKind.AGGREGATE, "agg", 1, 3),
        Task(TaskKind.TRANSFORM, "agg", 0, 3),
    ]
    assert len({t.id for t in tasks}) == len(tasks)


def test_for_recovery() -> None:
    task = Task(TaskKind.TRANSFORM, "clean", 1, 4, ranges=((1, 0, 10),))
    again = task.for_recovery(2, frozenset({"agg.0"}))
    assert again == Task(TaskKind.TRANSFORM, "clean", 1, 4, ranges=((1, 0, 10),), emit=frozenset({"agg.0"}), recovery=True, epoch=2)
    assert again.id != task.id


def test_to_json_omits_defaults() -> None:
    assert json.loads(Task(TaskKind.SINK, "out", 0, 2).to_json()) == {"k": "sink", "s": "out", "c": 0, "n": 2}


@pytest.mark.parametrize(
    "task",
    [
        Task(TaskKind.SOURCE, "events", 0, 1),
        Task(TaskKind.SOURCE, "events", 3, 12, ranges=((3, 100, 200),)),
        Task(TaskKind.SOURCE, "events", 3, 12, ranges=((3, 0, 0),)),
        Task(TaskKind.TRANSFORM, "clean-v2", 1, 4, emit=frozenset({"agg.0", "agg.1"}), recovery=True, epoch=5),
        Task(TaskKind.TRANSFORM, "clean", 1, 4, emit=frozenset()),
        Task(TaskKind.REBUILD, "per-user", 2, 9, first=1, recovery=True, epoch=1),
        Task(TaskKind.REBUILD, "per-user", 2, 0, first=1),
        Task(TaskKind.SINK, "out", 0, 0),
    ],
    ids=lambda t: t.id,
)
def test_task_json_round_trip(task: Task) -> None:
    back = Task.from_json(task.to_json())
    assert back == task
    for field in ("kind", "stage", "channel", "step", "first", "ranges", "emit", "recovery", "epoch"):
        assert getattr(back, field) == getattr(task, field), field
    assert Task.from_json(task.to_json().encode()) == task


@given(
    st.sampled_from(list(TaskKind)),
    stage_names,
    numbers,
    numbers,
    st.one_of(st.none(), numbers),
    st.one_of(st.none(), st.lists(st.tuples(numbers, numbers, numbers), max_size=3).map(tuple)),
    st.one_of(st.none(), st.frozensets(st.from_regex(r"\A[a-z]{1,5}\.[0-9]\Z"), max_size=4)),
    st.booleans(),
    st.integers(0, 50),
)
def test_task_json_round_trip_property(kind, stage, channel, step, first, ranges, emit, recovery, epoch) -> None:
    task = Task(kind, stage, channel, step, first=-1 if first is None else first, ranges=ranges,
                emit=emit, recovery=recovery, epoch=epoch)
    assert Task.from_json(task.to_json()) == task
