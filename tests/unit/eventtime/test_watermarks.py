"""The coordinator's watermark: the smallest channel's newest event time less its bound, never going
back, idle channels left out, every window final after the input ends, and a checkpoint's cut
restoring exactly what the steps up to it read."""

from __future__ import annotations

from ftpipeline.eventtime.columns import END_OF_INPUT
from ftpipeline.eventtime.watermarks import Watermarks
from ftpipeline.lineage.naming import Channel
from ftpipeline.spec.model import EventTime, FileSource, StageKind, StageSpec
from pathlib import Path

S = 1_000_000  # a second, in microseconds
A, B = Channel("views", 0), Channel("views", 1)


def source(bound_s: int = 10, idle_s: int = 0) -> StageSpec:
    return StageSpec("views", StageKind.SOURCE, 2, file=FileSource(Path("in"), "jsonl", 10),
                     event_time=EventTime("ts", bound_s * S, idle_s * S))


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_watermark_waits_for_every_channel_then_follows_the_slowest_less_the_bound() -> None:
    marks = Watermarks([source()], Clock())
    assert marks.next() is None
    marks.observe(A, 1, 100 * S, rows=5)
    assert marks.next() is None  # channel 1 has read nothing yet: no window may close
    marks.observe(B, 1, 50 * S, rows=5)
    assert marks.next() == 40 * S
    marks.record(2, marks.next())
    marks.observe(B, 2, 30 * S, rows=5)  # an older record: the channel's maximum stays 50
    assert marks.next() == 40 * S
    marks.observe(B, 3, 80 * S, rows=5)
    assert marks.next() == 70 * S


def test_the_watermark_never_goes_back() -> None:
    marks = Watermarks([source()], Clock())
    marks.record(4, 500 * S)  # recorded before (a replay): later reports of older data do not lower it
    marks.observe(A, 5, 100 * S, rows=1)
    marks.observe(B, 5, 100 * S, rows=1)
    assert marks.next() == 500 * S


def test_an_idle_channel_stops_holding_the_watermark_back_until_it_reads_again() -> None:
    clock = Clock()
    marks = Watermarks([source(idle_s=30)], clock)
    marks.observe(A, 1, 100 * S, rows=5)
    assert marks.next() is None  # channel 1 never read, but has not been idle for 30 s yet
    clock.now += 31
    marks.observe(A, 2, 200 * S, rows=5)
    assert marks.next() == 190 * S  # channel 1 is idle: channel 0 alone decides
    clock.now += 31
    assert marks.next() == 190 * S  # both idle: the largest of theirs
    marks.observe(B, 3, 120 * S, rows=5)
    marks.record(3, 190 * S)
    assert marks.next() == 190 * S  # active again, behind: it holds the watermark, which never goes back


def test_idleness_counts_from_the_first_step_not_from_when_the_coordinator_started() -> None:
    clock = Clock()
    marks = Watermarks([source(idle_s=30)], clock)
    clock.now += 120  # the workers took two minutes to start
    marks.observe(A, 1, 100 * S, rows=5)
    assert marks.next() is None  # channel 1 reads in the same step: it is not idle


def test_after_the_input_ends_one_step_runs_with_the_end_of_input() -> None:
    marks = Watermarks([source()], Clock())
    assert marks.end()
    marks.record(9, END_OF_INPUT)
    assert not marks.end() and marks.next() == END_OF_INPUT
    assert not Watermarks([], Clock()).end()  # no event time: no extra step


def test_a_checkpoint_carries_the_maxima_through_its_boundary_and_a_restore_starts_from_them() -> None:
    marks = Watermarks([source()], Clock())
    for step, (a, b) in enumerate([(10, 20), (30, 25), (60, 70)], start=1):
        marks.observe(A, step, a * S, rows=1)
        marks.observe(B, step, b * S, rows=1)
        marks.record(step + 1, marks.next())
    cut = marks.cut(2)
    assert cut == {"watermark": 0, "maxima": {"views.0": 30 * S, "views.1": 25 * S}}
    marks.settle(2)
    assert marks.maxima() == {A: 60 * S, B: 70 * S} and all(s > 2 for _, s in marks.reports)
    restored = Watermarks([source()], Clock())
    restored.restore(cut, 2)
    assert restored.current == 0 and restored.next() == 15 * S  # min(30, 25) - 10


def test_a_finished_channel_holds_nothing_back_and_the_holder_is_named() -> None:
    """A channel with nothing to read (no file of its own, or read to its end) is left out of the minimum, as
    Flink leaves out a finished or split-less reader; the channel the watermark comes from is named with how far
    behind the newest it is."""
    marks = Watermarks([source()], Clock())
    marks.observe(A, 1, 100 * S, rows=5)
    assert marks.next() is None and marks.holder() == (B, None)  # B has read nothing: it holds the watermark
    assert marks.next(finished={B}) == 90 * S  # ... unless it has nothing to read
    marks.observe(B, 2, 20 * S, rows=5)
    assert marks.next() == 10 * S and marks.holder() == (B, 80 * S)
    assert marks.next(finished={B}) == 90 * S and marks.holder(finished={B}) is None
    assert marks.next(finished={A, B}) == 90 * S  # every one finished: the furthest (the end step follows)


def test_the_watermark_before_a_step_is_the_one_the_step_before_ran_with() -> None:
    marks = Watermarks([source()], Clock())
    assert marks.before(1) is None
    marks.record(1, None)
    marks.record(2, 40 * S)
    assert marks.before(2) is None and marks.before(3) == 40 * S
    marks.settle(2)
    marks.record(3, 50 * S)
    assert marks.before(3) == 40 * S and marks.before(4) == 50 * S
