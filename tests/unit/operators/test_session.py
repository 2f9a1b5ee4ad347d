"""The session window operator against a plain Python model of sessions, on both state backends: what each
step emits, which records are late, that sessions merge when a record bridges them, and that a state rebuilt
step by step without emitting goes on exactly as the one that never stopped."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from ftpipeline.operators.base import StepContext
from ftpipeline.operators.session import SessionOperator
from ftpipeline.spec.model import AggregateOp, WindowSpec
from ftpipeline.state.backend import make_backend

from .holder import Holder, output_of
from .test_window import AGGS, S, emitted_rows, steps_of, table_of


def model(steps: list[tuple[list[dict[str, Any]], int | None]], gap: int, lateness: int, emit: str
          ) -> tuple[list[list[tuple[Any, ...]]], list[list[int]]]:
    """Per step: the sessions emitted (as ``test_window.summary`` has a window) and the late rows' ts."""
    held: dict[str, list[dict[str, Any]]] = {}   # key -> its open sessions {start, end, rows, step}
    emitted, lates = [], []
    for step, (rows, mark) in enumerate(steps):
        late: list[int] = []
        out = []
        for k in list(held):  # the watermark comes before the step's rows: what it closes takes none of them
            for s in list(held[k]):
                if mark is not None and s["end"] + lateness <= mark:
                    held[k].remove(s)
                    if emit == "append":
                        out.append(summary(k, s))
        for r in rows:
            t = r["ts"] * 1000
            if mark is not None and t + gap + lateness <= mark:
                late.append(r["ts"])
                continue
            mine = {"start": t, "end": t + gap, "rows": [r], "step": step}
            kept = []
            for s in held.get(r["k"], []):
                if s["start"] <= mine["end"] and mine["start"] <= s["end"]:
                    mine = {"start": min(s["start"], mine["start"]), "end": max(s["end"], mine["end"]),
                            "rows": s["rows"] + mine["rows"], "step": step}
                else:
                    kept.append(s)
            held[r["k"]] = [*kept, mine]
        if emit == "update":
            out = [summary(k, s) for k, ss in held.items() for s in ss if s["step"] == step]
        emitted.append(sorted(out))
        lates.append(sorted(late))
    return emitted, lates


def summary(k: str, s: dict[str, Any]) -> tuple[Any, ...]:
    rows = s["rows"]
    vs = [r["v"] for r in rows]
    first = min(rows, key=lambda r: (r["ts"], r["u"]))["u"]
    last = max(rows, key=lambda r: (r["ts"], r["u"]))["u"]
    return (k, s["start"], s["end"], len(rows), sum(vs), min(vs), sum(vs) / len(vs), first, last,
            len({r["u"] for r in rows}), len(set(vs)))


def check(got: pa.Table, want: list[tuple[Any, ...]], step: int) -> None:
    rows = emitted_rows(got)
    assert [g[:6] + g[7:] for g in rows] == [w[:6] + w[7:] for w in want], step
    assert [g[6] for g in rows] == pytest.approx([w[6] for w in want]), step


@pytest.mark.parametrize("backend_name", ["memory", "rocksdb"])
@pytest.mark.parametrize("gap_s, lateness_s, emit", [(8, 0, "append"), (8, 0, "update"), (3, 10, "append"),
                                                     (15, 5, "update")])
@pytest.mark.parametrize("seed", [1, 2])
def test_each_step_emits_what_the_model_of_sessions_says(tmp_path: Path, backend_name: str, gap_s: int,
                                                         lateness_s: int, emit: str, seed: int) -> None:
    window = WindowSpec("session", "ts", gap_us=gap_s * S, allowed_lateness_us=lateness_s * S, emit=emit)
    op = SessionOperator("s", AggregateOp(("k",), AGGS, window=window))
    holder = Holder(make_backend(backend_name, tmp_path), op.keys, op.index)
    steps = steps_of(seed, 16)
    want_rows, want_late = model(steps, gap_s * S, lateness_s * S, emit)
    for i, (rows, mark) in enumerate(steps, start=1):
        out = op.process(holder, table_of(rows), StepContext(i, mark, where="s.0"))
        check(output_of(out), want_rows[i - 1], i)
        late = sorted(out.late.column("ts").to_pylist()) if out.late is not None else []
        assert late == want_late[i - 1], i
    assert any(want_late), "the input has late rows"
    op.process(holder, table_of([]), StepContext(len(steps) + 1, 2**63 - 1))
    assert holder.state is not None
    assert not list(r for b in holder.state.scan() for r in b.to_pylist()), "every session and head left"


def test_a_record_between_two_sessions_merges_them(tmp_path: Path) -> None:
    window = WindowSpec("session", "ts", gap_us=10 * S, emit="append")
    op = SessionOperator("s", AggregateOp(("k",), AGGS, window=window))
    holder = Holder(make_backend("rocksdb", tmp_path), op.keys, op.index)
    one = {"k": "a", "v": 1, "u": "x"}
    op.process(holder, table_of([{**one, "ts": 0}, {**one, "ts": 18_000}]), StepContext(1, None))
    out = op.process(holder, table_of([{**one, "ts": 9_000, "v": 5}]), StepContext(2, 0))
    assert output_of(out).num_rows == 0
    out = op.process(holder, table_of([]), StepContext(3, 28 * S))
    assert [(r[1], r[2], r[3], r[4]) for r in emitted_rows(output_of(out))] == [(0, 28 * S, 3, 7)]


@pytest.mark.parametrize("backend_name", ["memory", "rocksdb"])
def test_a_session_state_rebuilt_step_by_step_goes_on_as_the_one_that_never_stopped(tmp_path: Path,
                                                                                 backend_name: str) -> None:
    window = WindowSpec("session", "ts", gap_us=8 * S, emit="append")
    steps = steps_of(3, 16)
    outputs = []
    for rebuild_until in (0, 7):
        op = SessionOperator("s", AggregateOp(("k",), AGGS, window=window))
        holder = Holder(make_backend(backend_name, tmp_path / str(rebuild_until)), op.keys, op.index)
        emitted = []
        for i, (rows, mark) in enumerate(steps, start=1):
            out = op.process(holder, table_of(rows), StepContext(i, mark, emit=i > rebuild_until))
            if i > rebuild_until:
                emitted.append(emitted_rows(output_of(out)))
        outputs.append(emitted[-(len(steps) - 7):])
    assert outputs[0] == outputs[1] and any(outputs[0])
