"""The window operator against a plain Python model of windows, on both state backends: what each step
emits, which records are late, and that a state rebuilt step by step without emitting goes on exactly
as the one that never stopped."""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from ftpipeline.operators.base import StepContext
from ftpipeline.operators.late import LATE_WATERMARK
from ftpipeline.operators.window import WindowOperator
from ftpipeline.spec.model import AggregateOp, Aggregation, WindowSpec
from ftpipeline.state.backend import make_backend

from .holder import Holder, output_of

S = 1_000_000
EPOCH, MICRO = datetime(1970, 1, 1, tzinfo=timezone.utc), timedelta(microseconds=1)
AGGS = (Aggregation("n", "count"), Aggregation("total", "sum", "v"), Aggregation("low", "min", "v"),
        Aggregation("mean", "avg", "v"), Aggregation("first_u", "first", "u"), Aggregation("last_u", "last", "u"),
        Aggregation("users", "countDistinct", "u"), Aggregation("values", "countDistinct", "v"))


def steps_of(seed: int, count: int = 12) -> list[tuple[list[dict[str, Any]], int | None]]:
    """Rows (event times drifting forward, some far behind) and each step's watermark (the largest event
    time of the steps before, less 5 s)."""
    rng = random.Random(seed)
    out: list[tuple[list[dict[str, Any]], int | None]] = []
    newest: int | None = None
    for step in range(count):
        rows = []
        for _ in range(rng.randrange(0, 30)):
            ts = step * 20_000 + rng.randrange(-40_000, 20_000)  # ms; some rows far behind
            rows.append({"k": rng.choice("abc"), "ts": ts, "v": rng.randrange(100), "u": rng.choice(["x", "y", "z"])})
        out.append((rows, None if newest is None else (newest - 5_000) * 1000))
        if rows:
            newest = max([newest or -10**18, *(r["ts"] for r in rows)])
    return out


def model(steps: list[tuple[list[dict[str, Any]], int | None]], size: int, slide: int, emit: str
          ) -> tuple[list[list[tuple[Any, ...]]], list[list[int]]]:
    """Per step: the rows emitted (key, start, n, total, low, mean, first, last) and the late rows' ts."""
    held: dict[tuple[str, int], list[dict[str, Any]]] = {}
    emitted, lates = [], []
    for rows, mark in steps:
        late, touched = [], set()
        for r in rows:
            t = r["ts"] * 1000
            starts = [s for s in range((t // slide) * slide - size + slide, t + 1, slide) if s <= t < s + size]
            open_ = [s for s in starts if mark is None or s + size > mark]
            if not open_:
                late.append(r["ts"])
            for s in open_:
                held.setdefault((r["k"], s), []).append(r)
                touched.add((r["k"], s))
        out = []
        if emit == "update":
            out = [summary(w, held[w], size) for w in sorted(touched)]
        for w in sorted(held):
            if mark is not None and w[1] + size <= mark:
                rows_of = held.pop(w)
                if emit == "append":
                    out.append(summary(w, rows_of, size))
        emitted.append(sorted(out))
        lates.append(sorted(late))
    return emitted, lates


def summary(w: tuple[str, int], rows: list[dict[str, Any]], size: int) -> tuple[Any, ...]:
    vs = [r["v"] for r in rows]
    first = min(rows, key=lambda r: (r["ts"], r["u"]))["u"]
    last = max(rows, key=lambda r: (r["ts"], r["u"]))["u"]
    return (w[0], w[1], w[1] + size, len(rows), sum(vs), min(vs), sum(vs) / len(vs), first, last,
            len({r["u"] for r in rows}), len(set(vs)))


def emitted_rows(table: pa.Table) -> list[tuple[Any, ...]]:
    out = []
    for r in table.to_pylist():
        start = (r["window_start"] - EPOCH) // MICRO
        end = (r["window_end"] - EPOCH) // MICRO
        out.append((r["k"], start, end, r["n"], r["total"], r["low"], r["mean"], r["first_u"], r["last_u"],
                    r["users"], r["values"]))
    return sorted(out)


def table_of(rows: list[dict[str, Any]]) -> pa.Table:
    schema = pa.schema([("k", pa.string()), ("ts", pa.int64()), ("v", pa.int64()), ("u", pa.string())])
    return pa.Table.from_pylist(rows, schema=schema)


@pytest.mark.parametrize("backend_name", ["memory", "rocksdb"])
@pytest.mark.parametrize("size_s, slide_s, emit", [(20, 20, "append"), (20, 20, "update"), (30, 10, "append"),
                                                    (30, 10, "update")])
@pytest.mark.parametrize("seed", [1, 2])
def test_each_step_emits_what_the_model_of_windows_says(tmp_path: Path, backend_name: str, size_s: int,
                                                        slide_s: int, emit: str, seed: int) -> None:
    window = WindowSpec("tumbling" if size_s == slide_s else "sliding", "ts", size_us=size_s * S,
                        slide_us=slide_s * S, emit=emit)
    op = WindowOperator("w", AggregateOp(("k",), AGGS, window=window))
    holder = Holder(make_backend(backend_name, tmp_path), op.keys, op.index)
    steps = steps_of(seed)
    want_rows, want_late = model(steps, size_s * S, slide_s * S, emit)
    for i, (rows, mark) in enumerate(steps, start=1):
        out = op.process(holder, table_of(rows), StepContext(i, mark, where="w.0"))
        got = emitted_rows(output_of(out))
        assert [g[:6] + g[7:] for g in got] == [w[:6] + w[7:] for w in want_rows[i - 1]], i
        assert [g[6] for g in got] == pytest.approx([w[6] for w in want_rows[i - 1]]), i
        late = sorted(out.late.column("ts").to_pylist()) if out.late is not None else []
        assert late == want_late[i - 1], i
        if out.late is not None:
            assert set(out.late.column(LATE_WATERMARK).cast(pa.int64()).to_pylist()) == {mark}
    assert any(want_late), "the input has late rows"


@pytest.mark.parametrize("backend_name", ["memory", "rocksdb"])
def test_a_state_rebuilt_step_by_step_goes_on_as_the_one_that_never_stopped(tmp_path: Path,
                                                                         backend_name: str) -> None:
    window = WindowSpec("sliding", "ts", size_us=30 * S, slide_us=10 * S, emit="append")
    steps = steps_of(3)
    outputs = []
    for rebuild_until in (0, 6):
        op = WindowOperator("w", AggregateOp(("k",), AGGS, window=window))
        holder = Holder(make_backend(backend_name, tmp_path / str(rebuild_until)), op.keys, op.index)
        emitted = []
        for i, (rows, mark) in enumerate(steps, start=1):
            out = op.process(holder, table_of(rows), StepContext(i, mark, emit=i > rebuild_until))
            if i > rebuild_until:
                emitted.append(emitted_rows(output_of(out)))
            else:
                assert out.rows is None and out.fired is None and out.late is None
        outputs.append(emitted[-(len(steps) - 6):])
    assert outputs[0] == outputs[1] and any(outputs[0])


def test_rows_without_a_key_or_an_event_time_are_dead_letters(tmp_path: Path) -> None:
    window = WindowSpec("tumbling", "ts", size_us=10 * S, slide_us=10 * S)
    op = WindowOperator("w", AggregateOp(("k",), (Aggregation("n", "count"),), window=window))
    holder = Holder(make_backend("memory", tmp_path), op.keys, op.index)
    rows = [{"k": None, "ts": 1, "v": 1, "u": "x"}, {"k": "a", "ts": None, "v": 1, "u": "x"},
            {"k": "a", "ts": 2, "v": 1, "u": "x"}]
    out = op.process(holder, table_of(rows), StepContext(1, None, where="w.0"))
    assert sorted(d.reason for d in out.dead) == ["null event time in ts", "null key in k"]
    assert all(d.location == "w.0" for d in out.dead)
    out = op.process(holder, table_of([]), StepContext(2, 10 * S))
    assert output_of(out).column("n").to_pylist() == [1]
