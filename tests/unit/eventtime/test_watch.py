"""What a run says about its event time (``eventtime/watch.py``): each warning once, naming the stage or channel,
and the held-back gauge following the channel that holds the watermark."""

from __future__ import annotations

from pathlib import Path

from ftpipeline.eventtime.watch import HELD_STEPS, EventTimeWatch
from ftpipeline.lineage.naming import Channel
from ftpipeline.spec.load import parse_pipeline

S = 1_000_000
A, B = Channel("views", 0), Channel("views", 1)
PIPELINE = """
apiVersion: ftpipeline.io/v1alpha1
kind: FTPipeline
metadata: {name: w}
spec:
  entryPoint: m.py
  workers: 1
  stages:
    - {name: views, parallelism: 2, source: {file: {path: d, format: jsonl, rowsPerStep: 10,
       schema: {page: string, ts: long}}, eventTime: {column: ts, watermark: {maxOutOfOrderness: 10s}}}}
    - {name: kept, inputs: [{stage: views}], aggregate: {keyBy: [page], window: {tumbling: {size: 1m},
       lateData: {path: late}}, aggregations: [{name: n, op: count}]}}
    - {name: dropped, inputs: [{stage: views}], aggregate: {keyBy: [page], window: {tumbling: {size: 1m}},
       aggregations: [{name: n, op: count}]}}
    - {name: out, inputs: [{stage: kept}], sink: {parquet: {path: o}}}
    - {name: out2, inputs: [{stage: dropped}], sink: {parquet: {path: o2}}}
"""


def watch() -> tuple[EventTimeWatch, list[tuple[str, str, str]], dict[str, float]]:
    said: list[tuple[str, str, str]] = []
    gauge: dict[str, float] = {}
    spec = parse_pipeline(PIPELINE, Path("/tmp"), check_entry_point=False)
    return EventTimeWatch(spec, lambda *a: said.append(a), gauge.__setitem__), said, gauge


def test_late_records_dropped_and_a_late_share_are_each_said_once_naming_the_stage() -> None:
    w, said, _ = watch()
    w.task_done("kept", 1, 1000, 5)      # kept (lateData), and 0.5%: nothing to say
    w.task_done("dropped", 1, 1000, 5)   # dropped: said
    w.task_done("dropped", 2, 1000, 50)  # now 55 of 2000, above 1%: said; dropped again: not again
    w.task_done("dropped", 3, 1000, 50)
    assert [(k, a) for k, a, _ in said] == [("late-dropped", "dropped"), ("late-share", "dropped")]
    assert "5 late records by step 1" in said[0][2] and "55 of the 2,000" in said[1][2]


def test_a_channel_holding_the_watermark_far_back_is_said_after_some_steps_and_the_gauge_follows_it() -> None:
    w, said, gauge = watch()
    bounds = {A: 10 * S, B: 10 * S}
    for _ in range(HELD_STEPS - 1):
        w.stepped((B, 3600 * S), bounds)
    assert not said and gauge == {"views.1": 3600.0}
    w.stepped((B, 3600 * S), bounds)
    assert [(k, a) for k, a, _ in said] == [("held-back", "views.1")] and "3,600 s behind" in said[0][2]
    w.stepped((B, 5 * S), bounds)  # caught up: no longer held far back
    assert gauge == {"views.1": 0.0}
    w.stepped((A, None), bounds)   # a channel that read nothing yet while the other read on
    assert gauge["views.0"] == float("inf")


def test_an_empty_channel_and_event_time_going_back_are_said() -> None:
    w, said, _ = watch()
    w.ended_empty(B)
    w.read(A, 1, 100 * S, 200 * S, 10 * S)
    w.read(A, 2, 195 * S, 300 * S, 10 * S)  # 5 s back: within the bound
    w.read(A, 3, 50 * S, 60 * S, 10 * S)    # 250 s back: a later file starting before the last ended
    assert [(k, a) for k, a, _ in said] == [("no-input", "views.1"), ("went-back", "views.0")]
    assert "went back 250 s" in said[1][2]
