"""The lineage tables' Lua scripts against a real Redis server."""

from __future__ import annotations

import json
import threading

import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ftpipeline.lineage.cemetery import IntervalSet
from ftpipeline.lineage.naming import Channel, ObjectName, Task, TaskKind, WorkerId
from ftpipeline.lineage.planner import RecoveryPlan
from ftpipeline.lineage.tables import Completion, LineageTables

W0, W1 = WorkerId("w0"), WorkerId("w1")


def obj(seq: int, actor: str = "a", target: str = "b", tc: int = 0) -> str:
    return ObjectName(actor, 0, seq, target, 1, tc).key()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(st.tuples(st.sampled_from(["add", "remove", "range"]), st.integers(1, 40), st.integers(0, 6)),
                    max_size=60))
def test_cemetery_lua_agrees_with_python(redis_client: redis.Redis, ops: list[tuple[str, int, int]]) -> None:
    tables = LineageTables(redis_client, "prop")
    tables.clear()
    edge = ObjectName.parse(obj(1)).edge.key()
    expected = IntervalSet()
    for op, seq, width in ops:
        if op == "add":
            tables.bury([obj(seq)])
            expected.add(seq)
        elif op == "remove":
            tables.resurrect([obj(seq)])
            expected.discard(seq)
        else:  # a checkpoint buries a whole range of an edge at once
            tables.bury_range([edge], seq, seq + width)
            for s in range(seq, seq + width + 1):
                expected.add(s)
    got = tables.cemetery().get(edge, IntervalSet())
    assert got == expected
    assert list(got) == sorted(set(got))


def test_cemetery_size_does_not_grow_with_steps(redis_client: redis.Redis, pipeline_name: str) -> None:
    tables = LineageTables(redis_client, pipeline_name)
    sizes = []
    for step in range(1, 2001):
        tables.bury([obj(step)])
        if step in (10, 2000):
            sizes.append(redis_client.hstrlen(tables.k("ct"), ObjectName.parse(obj(1)).edge.key()))
    assert tables.cemetery()[ObjectName.parse(obj(1)).edge.key()].intervals() == [(1, 2000)]
    assert sizes[1] <= sizes[0] + 3  # "[1,10]" vs "[1,2000]": the digits, not the steps


def _done(task: Task, outputs: list[str], consumed: list[str], state: int | None = None) -> Completion:
    return Completion(task, [(o, 5) for o in outputs], consumed, state, {"t": "done", "id": task.id}, {"tasks": 1})


def test_completion_is_recorded_atomically_and_fenced(redis_client: redis.Redis, pipeline_name: str) -> None:
    tables = LineageTables(redis_client, pipeline_name)
    tables.admit(W0)
    task = Task(TaskKind.TRANSFORM, "b", 0, 3)
    tables.assign([(W0, task)])
    assert tables.complete(W0, _done(task, [obj(3, "b", "c")], [obj(3)])) == 1
    assert tables.tasks_of(W0) == []
    assert tables.locate([obj(3, "b", "c")]) == [W0]
    assert obj(3, "b", "c") in {n.decode() for n in redis_client.smembers(tables.k("not:w0"))}
    assert Task.from_json(redis_client.hget(tables.k("lt"), obj(3, "b", "c"))) == task
    assert 3 in tables.cemetery()[ObjectName.parse(obj(3)).edge.key()]
    assert json.loads(redis_client.lpop(tables.k("inbox")))["id"] == task.id
    # the same completion again (its reply was lost, the client asked again): recorded, once
    stats = redis_client.hget(tables.k("stats"), "tasks")
    assert tables.complete(W0, _done(task, [obj(3, "b", "c")], [obj(3)])) == 1
    assert redis_client.hget(tables.k("stats"), "tasks") == stats and redis_client.llen(tables.k("inbox")) == 0
    # a task taken away before this worker finished it (a recovery plan moved it): superseded
    other = Task(TaskKind.TRANSFORM, "b", 1, 3)
    tables.assign([(W0, other)])
    redis_client.srem(tables.k("ntt:w0"), other.to_json())
    assert tables.complete(W0, _done(other, [obj(3, "b", "c")], [])) == 0
    # a worker that is not (or no longer) alive cannot record anything
    tables.assign([(W1, task)])
    assert tables.complete(W1, _done(task, [obj(3, "b", "c")], [])) == -1
    assert tables.tasks_of(W1) == [task]



def test_a_worker_of_an_earlier_run_is_refused_under_the_same_id(redis_client: redis.Redis, pipeline_name: str
                                                                  ) -> None:
    """Run 1's w0 stops mid-task; run 2 starts its own w0 with the same task. The old one wakes up: its
    completion and its sink write are refused, and the tables are as run 2 left them."""
    coordinator = LineageTables(redis_client, pipeline_name)
    zombie, current = LineageTables(redis_client, pipeline_name), LineageTables(redis_client, pipeline_name)
    task = Task(TaskKind.TRANSFORM, "b", 0, 3)
    coordinator.begin_run("r1-aaaa")
    coordinator.admit(W0)
    zombie.run = "r1-aaaa"
    coordinator.assign([(W0, task)])
    assert zombie.is_member(W0)
    coordinator.clear()  # run 2: a fresh start over the same identity
    coordinator.begin_run("r2-bbbb")
    coordinator.admit(W0)
    current.run = "r2-bbbb"
    coordinator.assign([(W0, task)])
    before = {k: redis_client.dump(k) for k in redis_client.scan_iter(match=f"{coordinator.prefix}*")
              if not k.endswith(b"stats")}
    assert zombie.complete(W0, _done(task, [obj(3, "b", "c")], [obj(3)])) == -1
    assert not zombie.is_member(W0)  # so its sidecar refuses its sink write (may_write)
    after = {k: redis_client.dump(k) for k in redis_client.scan_iter(match=f"{coordinator.prefix}*")
             if not k.endswith(b"stats")}
    assert after == before
    assert int(redis_client.hget(coordinator.k("stats"), "fenced_commits") or 0) == 1
    # the current run's w0 records the same task
    assert current.is_member(W0)
    assert current.complete(W0, _done(task, [obj(3, "b", "c")], [obj(3)])) == 1
    assert coordinator.locate([obj(3, "b", "c")]) == [W0]


def test_a_completion_during_a_clear_is_dropped_not_refused_as_a_zombies(redis_client: redis.Redis,
                                                                         pipeline_name: str) -> None:
    """A resumed coordinator clears the tables while a worker it is about to take over still finishes the
    earlier run's tasks: whenever the completion lands during the clear, it finds no member (dropped, -2)
    or is recorded, never members but no token (refused, -1: that stops the worker)."""
    coordinator, worker = LineageTables(redis_client, pipeline_name), LineageTables(redis_client, pipeline_name)
    coordinator.begin_run("r1-aaaa", members=[W0])
    worker.run = "r1-aaaa"
    redis_client.mset({coordinator.k(f"filler:{i}"): i for i in range(4000)})  # a clear of some length
    tasks = [Task(TaskKind.TRANSFORM, "b", 0, step) for step in range(1, 4001)]
    coordinator.assign([(W0, t) for t in tasks])
    results: list[int] = []
    clearing = threading.Thread(target=coordinator.clear)
    clearing.start()
    for t in tasks:
        results.append(worker.complete(W0, _done(t, [obj(t.step, "b", "c")], [obj(t.step)])))
        if not clearing.is_alive() and results[-1] == -2:
            break
    clearing.join()
    assert -1 not in results and results[-1] == -2


def test_twin_tasks_bury_their_inputs_only_when_the_last_one_finishes(redis_client: redis.Redis,
                                                                      pipeline_name: str) -> None:
    """Two recoveries left two tasks of b.0@3 on w0, each writing other outputs: the first to finish
    must leave a.0@3 out of the cemetery (the collector would delete it), the second buries it."""
    tables = LineageTables(redis_client, pipeline_name)
    tables.admit(W0)
    first = Task(TaskKind.TRANSFORM, "b", 0, 3, recovery=True, epoch=1, emit=frozenset({obj(3, "b", "c")}))
    second = Task(TaskKind.TRANSFORM, "b", 0, 3, recovery=True, epoch=2, emit=frozenset({obj(3, "b", "c", tc=1)}))
    tables.assign([(W0, first), (W0, second)])
    edge = ObjectName.parse(obj(3)).edge.key()
    assert tables.complete(W0, _done(first, [obj(3, "b", "c")], [obj(3)])) == 1
    assert 3 not in tables.cemetery().get(edge, IntervalSet())
    assert tables.complete(W0, _done(second, [obj(3, "b", "c", tc=1)], [obj(3)])) == 1
    assert 3 in tables.cemetery()[edge]


def test_collect_drops_consumed_objects_unless_recovery_holds_the_lock(redis_client: redis.Redis, pipeline_name: str) -> None:
    tables = LineageTables(redis_client, pipeline_name)
    tables.admit(W0)
    producer = Task(TaskKind.SOURCE, "a", 0, 1, ranges=((0, 0, 5),))
    tables.assign([(W0, producer)])
    tables.complete(W0, _done(producer, [obj(1), obj(1, tc=1)], []))
    tables.bury([obj(1)])
    tables.lock_exclusive("coord")
    assert tables.collect(W0) is None
    tables.unlock_exclusive("coord")
    assert tables.collect(W0) == [obj(1)]
    assert tables.locate([obj(1), obj(1, tc=1)]) == [None, W0]


def test_object_entering_the_cemetery_while_planned_is_resurrected(redis_client: redis.Redis, pipeline_name: str) -> None:
    """Seed edge case: the plan relies on an object that a consumer buries meanwhile."""
    tables = LineageTables(redis_client, pipeline_name)
    for w in (W0, W1):
        tables.admit(w)
    producer = Task(TaskKind.SOURCE, "a", 0, 4, ranges=((0, 0, 5),))
    tables.assign([(W0, producer)])
    tables.complete(W0, _done(producer, [obj(4)], []))
    tables.lock_exclusive("coord")
    view = tables.snapshot([W0, W1])
    assert not view.consumed(obj(4))
    relaunch = Task(TaskKind.TRANSFORM, "b", 0, 4, recovery=True, epoch=1)
    plan = RecoveryPlan(
        dead=W1, epoch=1, placement={Channel("b", 0): W0}, moves={Channel("b", 0): W0},
        tasks=((W0, relaunch),), replaced=(), resurrect=frozenset({obj(4)}), lost=frozenset(),
        buffered_rows=0, planned_rows=5,
    )
    tables.bury([obj(4)])  # the object enters the cemetery after the snapshot
    tables.apply(plan)
    tables.unlock_exclusive("coord")
    assert 4 not in tables.cemetery().get(ObjectName.parse(obj(4)).edge.key(), IntervalSet())
    assert tables.collect(W0) == []
    assert tables.locate([obj(4)]) == [W0]
    assert tables.tasks_of(W0) == [relaunch]
    assert tables.alive() == {W0}
    assert tables.epoch() == 1


def test_a_replayed_step_counts_its_dead_letters_once(redis_client: redis.Redis, pipeline_name: str) -> None:
    """A source task re-run by recovery (or after a rollback) finds the same malformed records again:
    the count, the stats and the event's ``dead_new`` see them once."""
    from dataclasses import replace

    tables = LineageTables(redis_client, pipeline_name)
    tables.admit(W0)
    first = Task(TaskKind.SOURCE, "a", 0, 2, ranges=((0, 0, 10),))
    again = first.for_recovery(1)
    other = Task(TaskKind.SOURCE, "a", 1, 2, ranges=((1, 0, 10),))
    events = []
    for task, dead in ((first, 3), (again, 3), (other, 2), (first, 3)):
        tables.assign([(W0, task)])
        assert tables.complete(W0, replace(_done(task, [obj(2)], []), dead_letters=dead)) == 1
        events.append(json.loads(redis_client.rpop(tables.k("inbox"))))
    stats = {k.decode(): int(v) for k, v in redis_client.hgetall(tables.k("stats")).items()}
    assert stats["dead_letters"] == 5
    assert stats["tasks"] == 4
    assert [e.get("dead_new", 0) for e in events] == [3, 0, 2, 0]


def test_an_event_with_new_dead_letters_keeps_its_numbers_exact(redis_client: redis.Redis, pipeline_name: str) -> None:
    """The completion script adds ``dead_new`` to the event as text: re-encoded by Redis's cjson, every number
    became a double, and an event time in microseconds came back as a float (the oracle then refused the
    recorded watermark: examples/ad-clicks, one run in three)."""
    from dataclasses import replace

    tables = LineageTables(redis_client, pipeline_name)
    tables.admit(W0)
    task = Task(TaskKind.SOURCE, "a", 0, 2, ranges=((0, 0, 10),))
    tables.assign([(W0, task)])
    done = _done(task, [obj(2)], [])
    done = replace(done, dead_letters=2, event={**done.event, "tmax": 1_767_226_145_507_123, "rows_in": 10})
    assert tables.complete(W0, done) == 1
    event = json.loads(redis_client.rpop(tables.k("inbox")))
    assert event["tmax"] == 1_767_226_145_507_123 and isinstance(event["tmax"], int)
    assert (event["dead_new"], event["rows_in"]) == (2, 10)


def test_a_rerun_whose_rows_differ_from_the_first_runs_is_counted_diverged(redis_client: redis.Redis,
                                                                          pipeline_name: str) -> None:
    """A keyed function's outputs carry digests; the first is kept until a checkpoint trims its step, and a
    re-run with another digest for the same object is counted in its event (lineage/determinism.py)."""
    from dataclasses import replace

    tables = LineageTables(redis_client, pipeline_name)
    tables.admit(W0)
    first = Task(TaskKind.SOURCE, "a", 0, 2, ranges=((0, 0, 10),))
    events = []
    for task, digests in ((first, {obj(2): "d1"}), (first.for_recovery(1), {obj(2): "d1"}),
                          (first.for_recovery(2), {obj(2): "other"}), (first.for_recovery(3), {obj(2): "d1"})):
        tables.assign([(W0, task)])
        assert tables.complete(W0, replace(_done(task, [obj(2)], []), digests=digests)) == 1
        events.append(json.loads(redis_client.rpop(tables.k("inbox"))))
    assert [e.get("diverged", 0) for e in events] == [0, 0, 1, 0]
    assert tables.trim(2) >= 1  # the step is covered by a checkpoint: its digest goes with its lineage
    assert redis_client.hlen(tables.k("digest")) == 0
