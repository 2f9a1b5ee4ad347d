"""The timeline: every event on one clock, steps and outages paired, and a snapshot that is plain JSON."""

from __future__ import annotations

import json
import threading
from typing import Any

from ftpipeline.coordinator.recovery import RecoveryRecord
from ftpipeline.coordinator.trigger import Reason
from ftpipeline.lineage.naming import Channel
from ftpipeline.report.timeline import Timeline, pair_outages, steps_of
from ftpipeline.spec.model import PipelineSpec

from .conftest import W0, W1, W2, Clock, play, recovery_of_w1


def test_a_snapshot_holds_every_event_in_order_on_the_timelines_clock(spec: PipelineSpec, clock: Clock) -> None:
    timeline = Timeline(spec, clock=clock)
    play(timeline, clock)
    snap = timeline.snapshot()
    json.dumps(snap)  # plain JSON values only
    kinds = [e["kind"] for e in snap["events"]]
    assert kinds[:4] == ["workers-starting", "worker-joined", "worker-joined", "worker-joined"]
    assert kinds.count("step-committed") == 5 and kinds.count("control-plane") == 3
    times = [e["t"] for e in snap["events"]]
    assert times == sorted(times) and times[0] == 0.0
    assert snap["pipeline"] == "clickstream" and snap["ended"] is None
    assert snap["elapsed"] == round(clock.now - 100.0, 4)


def test_steps_carry_their_reason_rows_and_the_time_they_committed(spec: PipelineSpec, clock: Clock) -> None:
    timeline = Timeline(spec, clock=clock)
    play(timeline, clock)
    steps = timeline.snapshot()["steps"]
    assert [s["step"] for s in steps] == [1, 2, 3, 4, 5]
    third = steps[2]
    assert third["reason"] == "timer" and third["rows"] == 2500 and third["seconds"] == 1.45
    assert third["committed"] > third["started"]


def test_a_recovery_spans_from_its_detection_to_the_next_commit(spec: PipelineSpec, clock: Clock) -> None:
    timeline = Timeline(spec, clock=clock)
    play(timeline, clock)
    snap = timeline.snapshot()
    [r] = snap["recoveries"]
    lost = next(e for e in snap["events"] if e["kind"] == "worker-lost")
    assert r["worker"] == "w1" and r["strategy"] == "lineage" and r["tasks"] == 4 and r["survivors"] == 2
    assert r["detected"] == lost["t"]  # the recovery's own seconds, counted back from when it was applied
    assert r["to_commit_seconds"] == 1.25
    third = snap["steps"][2]
    assert r["next_commit"] == third["committed"]
    assert "lineage recovery of worker w1 in 250 ms" in r["description"]
    assert r["moves"] == {"events.1": "w2", "per-user.1": "w0"}


def test_the_next_commit_of_a_recovery_is_read_when_the_coordinator_fills_it_in(spec: PipelineSpec,
                                                                               clock: Clock) -> None:
    timeline = Timeline(spec, clock=clock)
    timeline.on_worker_lost(W1)
    record = recovery_of_w1(clock.now)
    timeline.on_recovery(record)
    assert timeline.snapshot()["recoveries"][0]["next_commit"] is None
    record.to_commit_seconds = 2.0
    assert timeline.snapshot()["recoveries"][0]["next_commit"] == 2.0


def test_the_graph_places_channels_by_the_start_rule_then_follows_recoveries(spec: PipelineSpec,
                                                                            clock: Clock) -> None:
    timeline = Timeline(spec, clock=clock)
    timeline.on_workers_starting([W2, W0, W1])
    before = {c["key"]: c["worker"] for c in timeline.snapshot()["graph"]["channels"]}
    assert before == {"events.0": "w0", "events.1": "w1", "events.2": "w2",
                      "per-user.0": "w0", "per-user.1": "w1", "per-user.2": "w2"}
    play(timeline, clock)
    graph = timeline.snapshot()["graph"]
    after = {c["key"]: (c["worker"], c["initial_worker"]) for c in graph["channels"]}
    assert after["events.1"] == ("w2", "w1") and after["per-user.1"] == ("w0", "w1")
    assert after["events.0"] == ("w0", "w0")


def test_a_placement_probe_wins_over_what_the_events_say(spec: PipelineSpec, clock: Clock) -> None:
    timeline = Timeline(spec, clock=clock)
    timeline.on_workers_starting([W0, W1, W2])
    placement = {Channel(s, i): W0 for s in ("events", "per-user") for i in range(3)}
    timeline.follow_placement(lambda: placement)
    assert {c["worker"] for c in timeline.snapshot()["graph"]["channels"]} == {"w0"}

    def broken() -> dict[Channel, Any]:
        raise RuntimeError("the coordinator is gone")

    timeline.follow_placement(broken)  # never stops a snapshot: the events' placement stands
    assert {c["worker"] for c in timeline.snapshot()["graph"]["channels"]} == {"w0", "w1", "w2"}


def test_the_physical_graph_merges_chains_and_links_a_hash_edge_all_to_all(spec: PipelineSpec) -> None:
    graph = Timeline(spec).snapshot()["graph"]
    assert [(s["name"], s["members"], s["column"]) for s in graph["stages"]] == [
        ("events", ["events", "clean"], 0), ("per-user", ["per-user", "output"], 1)]
    assert graph["edges"] == [{"upstream": "events", "downstream": "per-user", "partition": "hash",
                               "keys": ["user_id"]}]
    assert len(graph["links"]) == 9 and {link["partition"] for link in graph["links"]} == {"hash"}


def test_a_timeline_without_a_spec_has_no_graph() -> None:
    assert Timeline().snapshot()["graph"] is None


def test_worker_lost_keeps_how_it_was_found_and_whatever_else_the_coordinator_passes() -> None:
    timeline = Timeline()
    timeline.on_worker_lost(W1, "heartbeat expiry after 6000 ms")
    timeline.on_worker_lost(W2, "its processes ended", "later", ring="w0", seconds=1.5)
    first, second = timeline.snapshot()["events"]
    assert first == {"t": first["t"], "kind": "worker-lost", "worker": "w1", "how": "heartbeat expiry after 6000 ms"}
    assert second == {"t": second["t"], "kind": "worker-lost", "worker": "w2", "how": "its processes ended",
                      "ring": "w0", "seconds": 1.5, "args": ["later"]}


def test_a_fenced_worker_is_a_worker_event() -> None:
    timeline = Timeline()
    timeline.on_fenced(W1, "its commit of step 4 was refused")
    [event] = timeline.snapshot()["workers"]
    assert (event["kind"], event["worker"]) == ("worker-fenced", "w1")
    assert event["what"] == "its commit of step 4 was refused"


def test_a_rollback_is_a_recovery_with_no_worker_ending_at_the_next_commit_seen(spec: PipelineSpec,
                                                                               clock: Clock) -> None:
    timeline = Timeline(spec, clock=clock)
    clock.advance(5.0)
    record = RecoveryRecord(None, "checkpoint", 3, (), {}, clock.now, seconds=0.5,  # type: ignore[arg-type]
                            boundary=6, replay_to=9)
    timeline.on_rollback(record)  # the coordinator measures no next commit for it
    clock.advance(2.0)
    timeline.on_step_started(7, Reason.REPLAY, 100)
    clock.advance(1.0)
    timeline.on_step_committed(7, 100, 1.0)
    [r] = timeline.snapshot()["recoveries"]
    assert (r["kind"], r["worker"], r["strategy"], r["boundary"]) == ("rollback", "", "rollback", 6)
    assert r["detected"] == 4.5 and r["next_commit"] == 8.0 and r["to_commit_seconds"] == 3.5
    assert r["description"].startswith("rolled back to the checkpoint at step 6")


def test_finish_ends_the_clock_of_the_snapshot(clock: Clock) -> None:
    timeline = Timeline(clock=clock)
    clock.advance(3.0)
    timeline.finish("failed", "exit code 1")
    clock.advance(10.0)
    snap = timeline.snapshot()
    assert timeline.ended and snap["ended"] == {"t": 3.0, "outcome": "failed", "message": "exit code 1"}
    assert snap["elapsed"] == 3.0


def _cp(t: float, component: str, available: bool) -> dict[str, Any]:
    return {"t": t, "kind": "control-plane", "component": component, "available": available, "message": f"{t}"}


def test_outages_pair_a_components_first_unavailable_with_its_next_available() -> None:
    events = [_cp(1, "redis", False), _cp(2, "zookeeper", False), _cp(3, "redis", False), _cp(4, "redis", True),
              _cp(5, "redis", True), _cp(6, "zookeeper", True), _cp(7, "kafka", True), _cp(8, "redis", False)]
    assert [(o["component"], o["start"], o["end"]) for o in pair_outages(events)] == [
        ("redis", 1, 4), ("zookeeper", 2, 6), ("redis", 8, None)]
    assert pair_outages(events)[0]["down"] == "1" and pair_outages(events)[0]["up"] == "4"


def test_a_step_run_again_after_a_rollback_is_two_entries_and_an_unknown_start_is_kept() -> None:
    events = [{"t": 0.0, "kind": "step-committed", "step": 6, "rows": 10, "seconds": 0.2},
              {"t": 1.0, "kind": "step-started", "step": 7, "reason": "records", "rows": 10},
              {"t": 2.0, "kind": "step-started", "step": 7, "reason": "replay", "rows": 10},
              {"t": 3.0, "kind": "step-committed", "step": 7, "rows": 10, "seconds": 1.0}]
    steps = steps_of(events)
    assert [(s["step"], s["reason"], s["committed"]) for s in steps] == [
        (6, "", 0.0), (7, "records", None), (7, "replay", 3.0)]


def test_callbacks_from_many_threads_while_snapshots_are_taken(spec: PipelineSpec) -> None:
    timeline = Timeline(spec)
    stop = threading.Event()
    errors: list[BaseException] = []

    def read() -> None:
        while not stop.is_set():
            try:
                json.dumps(timeline.snapshot())
            except BaseException as exc:  # noqa: BLE001 (the test reports it)
                errors.append(exc)
                return

    def write(offset: int) -> None:
        for i in range(500):
            timeline.on_step_started(offset + i, Reason.RECORDS, i)
            timeline.on_control_plane("redis", i % 2 == 1, "x")
            timeline.on_step_committed(offset + i, i, 0.01)

    reader = threading.Thread(target=read)
    reader.start()
    writers = [threading.Thread(target=write, args=(n * 1000,)) for n in range(4)]
    for w in writers:
        w.start()
    for w in writers:
        w.join()
    stop.set()
    reader.join()
    assert not errors
    snap = timeline.snapshot()
    assert len(snap["steps"]) == 2000 and all(s["committed"] is not None for s in snap["steps"])
    assert len(snap["events"]) == 6000
