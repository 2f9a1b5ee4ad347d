"""Flink's order in a step (``eventtime/order.py``): rows an operator emitted because the watermark advanced are
taken downstream before that advance, judged against the watermark before it, and the mark that says so travels
with the rows and never reaches the user's code."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from ftpipeline.eventtime.columns import END_OF_INPUT
from ftpipeline.eventtime.order import EARLY, apart, early_only, has_early, held, plain, together
from ftpipeline.lineage.stepclock import StepClock
from ftpipeline.operators.base import Emitted, StepContext
from ftpipeline.worker.states import _step


def test_the_two_kinds_travel_as_one_table_and_come_apart_unmarked() -> None:
    early, after = pa.table({"x": [1, 2]}), pa.table({"x": [3]})
    both = together(early, after)
    assert both is not None and has_early(both) and not early_only(both)
    got_early, got_after = apart(both)
    assert got_early.equals(early) and got_after.equals(after) and plain(both).column_names == ["x"]
    assert together(None, after) is after and not has_early(after)  # nothing early: no mark at all
    assert together(pa.table({"x": pa.array([], pa.int64())}), after) is after
    only = together(early, None)
    assert only is not None and early_only(only)
    assert apart(after)[0].num_rows == 0 and apart(after)[1].equals(after)


def test_a_watermark_held_back_by_a_join_keeps_the_end_of_input() -> None:
    assert held(100, 30) == 70 and held(None, 30) is None and held(END_OF_INPUT, 30) == END_OF_INPUT


class Recorder:
    """An operator that records what each call got and emits its rows back: what the advance would fire as
    ``fired``, the rest as ``rows``."""

    keys: list[str] = ["k"]
    index = None
    folds_at_once = False
    by_input = False

    def __init__(self) -> None:
        self.calls: list[tuple[list[int], int | None, bool, bool]] = []

    def process(self, state: Any, table: pa.Table, ctx: StepContext) -> Emitted:
        assert EARLY not in table.column_names  # the mark never reaches an operator
        self.calls.append((table.column("x").to_pylist(), ctx.watermark, ctx.advance, ctx.first))
        fired = pa.table({"x": [ctx.watermark or 0]}) if ctx.advance else pa.table({"x": pa.array([], pa.int64())})
        return Emitted(rows=table, fired=fired)

    def evict(self, state: Any, step: int) -> int:
        return 0


def test_rows_from_before_the_advance_are_a_call_of_their_own_with_the_watermark_before() -> None:
    op = Recorder()
    rows = together(pa.table({"x": [1, 2]}), pa.table({"x": [3]}))
    assert rows is not None
    out = _step(op, None, {"": rows}, StepClock(50, before=40), StepContext(7, 50), timed=True)  # type: ignore[arg-type]
    assert op.calls == [([1, 2], 40, False, True), ([3], 50, True, False)]
    # what the early call emitted and what the advance fired come first downstream; the rest after
    assert out.early is not None and out.early.column("x").to_pylist() == [1, 2, 50]
    assert out.after is not None and out.after.column("x").to_pylist() == [3]


def test_a_step_with_no_early_row_is_one_call_and_an_operator_without_event_time_takes_both_as_one() -> None:
    op = Recorder()
    out = _step(op, None, {"": pa.table({"x": [3]})}, StepClock(50, before=40), StepContext(7, 50), timed=True)  # type: ignore[arg-type]
    assert op.calls == [([3], 50, True, True)]
    assert out.early is not None and out.early.column("x").to_pylist() == [50]
    untimed = Recorder()
    rows = together(pa.table({"x": [1]}), pa.table({"x": [3]}))
    assert rows is not None
    out = _step(untimed, None, {"": rows}, StepClock(50, before=40), StepContext(7, 50), timed=False)  # type: ignore[arg-type]
    assert untimed.calls == [([1, 3], 50, True, True)] and out.after is not None
