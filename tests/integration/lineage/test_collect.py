"""Garbage collection walks what was buried since the last collection, never the whole buffer, and
drops exactly what the full walk would (real Redis, the real Lua scripts)."""

from __future__ import annotations

import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ftpipeline.lineage.cemetery import IntervalSet
from ftpipeline.lineage.naming import ObjectName, Task, TaskKind, WorkerId
from ftpipeline.lineage.tables import Completion, LineageTables

W0, W1 = WorkerId("w0"), WorkerId("w1")


def obj(seq: int, tc: int = 0) -> str:
    return ObjectName("a", 0, seq, "b", 1, tc).key()


def produce(tables: LineageTables, worker: WorkerId, seq: int, names: list[str]) -> None:
    task = Task(TaskKind.SOURCE, "a", 0, seq, ranges=((0, 0, 5),))
    tables.assign([(worker, task)])
    assert tables.complete(worker, Completion(task, [(n, 5) for n in names], [], None, {"t": "done"}, {})) == 1


def held(r: redis.Redis, tables: LineageTables, worker: WorkerId) -> set[str]:
    return {n.decode() for n in r.smembers(tables.k(f"not:{worker}"))}


def consumed(tables: LineageTables, name: str) -> bool:
    o = ObjectName.parse(name)
    return o.seq in tables.cemetery().get(o.edge.key(), IntervalSet())


OPS = st.lists(st.tuples(st.sampled_from(["produce", "bury", "range", "resurrect", "collect"]),
                         st.integers(1, 25), st.integers(0, 4), st.sampled_from([W0, W1])), max_size=50)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS)
def test_incremental_collection_keeps_exactly_the_unconsumed(redis_client: redis.Redis,
                                                              ops: list[tuple[str, int, int, WorkerId]]) -> None:
    """After a worker's collection its buffer holds exactly its objects not in the cemetery that PT
    locates there: nothing consumed stays (the candidates missed none), nothing a reader may fetch goes."""
    tables = LineageTables(redis_client, "gcprop")
    tables.clear()
    tables.admit(W0)
    tables.admit(W1)
    edge = ObjectName.parse(obj(1)).edge.key()
    produced: dict[str, WorkerId] = {}
    for op, seq, width, worker in ops:
        if op == "produce":
            names = [obj(seq, tc) for tc in (0, 1)]
            produce(tables, worker, seq, names)
            produced.update(dict.fromkeys(names, worker))
        elif op == "bury":
            tables.bury([obj(seq, width % 2)])
        elif op == "range":
            tables.bury_range([edge], seq, seq + width, held_from=seq)
        elif op == "resurrect":
            tables.resurrect([obj(seq, width % 2)])
        else:
            before = held(redis_client, tables, worker)
            dropped = tables.collect(worker)
            assert dropped is not None
            after = held(redis_client, tables, worker)
            # what stays is unconsumed and located here (a copy another worker wrote again is not read)
            assert after == {n for n in before if not consumed(tables, n) and tables.locate([n]) == [worker]}
            assert set(dropped) == before - after
            assert worker not in tables.locate(sorted(set(dropped)))  # no reader is sent here for them


def test_a_collection_walks_only_what_was_buried_since_the_last(redis_client: redis.Redis, pipeline_name: str) -> None:
    """A worker holding 2000 unconsumed objects: each collection's candidate set is the step's few."""
    tables = LineageTables(redis_client, pipeline_name)
    tables.admit(W0)
    for seq in range(1, 1001):
        produce(tables, W0, seq, [obj(seq, 0), obj(seq, 1)])
    candidates = tables.k(f"gc:{W0}")
    for seq in range(1, 11):
        tables.bury([obj(seq, 0)])
        assert redis_client.scard(candidates) == 1
        assert tables.collect(W0) == [obj(seq, 0)]
        assert redis_client.scard(candidates) == 0
    assert len(held(redis_client, tables, W0)) == 2000 - 10


def test_a_checkpoints_range_marks_only_the_steps_since_the_previous_one(redis_client: redis.Redis,
                                                                           pipeline_name: str) -> None:
    tables = LineageTables(redis_client, pipeline_name)
    tables.admit(W0)
    for seq in range(1, 21):
        produce(tables, W0, seq, [obj(seq)])
    edge = ObjectName.parse(obj(1)).edge.key()
    tables.bury_range([edge], 1, 10)
    assert sorted(tables.collect(W0) or []) == sorted(obj(s) for s in range(1, 11))
    tables.bury_range([edge], 1, 20, held_from=11)
    assert redis_client.scard(tables.k(f"gc:{W0}")) == 10
    assert sorted(tables.collect(W0) or []) == sorted(obj(s) for s in range(11, 21))
    assert held(redis_client, tables, W0) == set()


def test_a_replayed_object_that_was_already_consumed_is_collected(redis_client: redis.Redis,
                                                                  pipeline_name: str) -> None:
    """A recovery can regenerate an object a consumer had already buried: its holder lets it go too."""
    tables = LineageTables(redis_client, pipeline_name)
    tables.admit(W0)
    tables.admit(W1)
    produce(tables, W0, 1, [obj(1)])
    tables.bury([obj(1)])
    assert tables.collect(W0) == [obj(1)]
    produce(tables, W1, 1, [obj(1)])
    assert tables.collect(W1) == [obj(1)]
    assert tables.locate([obj(1)]) == [None]
