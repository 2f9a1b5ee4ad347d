"""Random chains of event-time operators, run twice: through the runtime's own operators, step by step in Flink's
order as a worker runs them (``worker/states.py``, the runtime's ``Watermarks``), and through the reference
interpreter (``oracle/reference.py``). Used by ``test_reference.py`` (a sample of seeds) and by
``bench/eventtime_reference.py`` (many)."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow as pa

from ftpipeline.eventtime.columns import END_OF_INPUT
from ftpipeline.eventtime.order import held, plain, together
from ftpipeline.eventtime.watermarks import Watermarks
from ftpipeline.lineage.naming import Channel
from ftpipeline.lineage.stepclock import StepClock
from ftpipeline.operators.base import Operator, StepContext
from ftpipeline.operators.dedup import Deduplicate
from ftpipeline.operators.join import IntervalJoin
from ftpipeline.operators.process import ProcessOperator
from ftpipeline.operators.session import SessionOperator
from ftpipeline.operators.window import WindowOperator
from ftpipeline.oracle.reference import Join, Op, Outcome, run, watermarks
from ftpipeline.spec.model import (Aggregation, AggregateOp, DeduplicateOp, EventTime, FileSource, JoinOp, ProcessOp,
                                   StageKind, StageSpec, WindowSpec)
from ftpipeline.state.backend import make_backend
from ftpipeline.worker.states import _step

S = 1_000_000
BOUND = 10 * S
TIMES = ("t", "left_t", "right_t", "window_start", "window_end")
TIME = pa.timestamp("us", tz="UTC")


class Holder:
    def __init__(self, backend: Any, keys: list[str], index: str | None) -> None:
        self.backend, self.keys, self.index, self.state = backend, keys, index, None

    def get(self) -> Any:
        return self.state

    def create(self, schema: pa.Schema) -> Any:
        self.state = self.backend.create("op.0", schema, self.keys, self.index)
        return self.state


def chain(seed: int) -> tuple[Join | None, list[Op], list[dict[str, list[dict[str, Any]]]]]:
    """A random chain of 2 to 4 event-time operators and its input: steps of rows per source."""
    rng = random.Random(seed)
    join = None
    if rng.random() < 0.35:
        sides: list[tuple[tuple[Op, ...], str]] = []
        for _ in "LR":  # a side's own window before the join (window -> join), or none
            if rng.random() < 0.6:
                sides.append(((), "t"))
                continue
            kind = rng.choice(["tumble", "slide", "session"])
            lateness = rng.choice([0, 30 * S])
            sides.append(((Op(kind, "t", size=60 * S, lateness=lateness),) if kind == "tumble" else
                          (Op(kind, "t", size=60 * S, slide=30 * S, lateness=lateness),) if kind == "slide" else
                          (Op(kind, "t", gap=45 * S, lateness=lateness),), rng.choice(["window_start", "window_end"])))
        (left, left_time), (right, right_time) = sides
        join = Join(rng.choice(["inner", "left"]), rng.choice([0, -30 * S, -2 * 60 * S]),
                    rng.choice([60 * S, 3 * 60 * S]), left, right, left_time, right_time)
    ops: list[Op] = []
    time = "t" if join is None else (join.named(join.left_time, "L") if join.kind == "left" or rng.random() < 0.5
                                     else join.named(join.right_time, "R"))
    for _ in range(rng.randrange(1, 4) if join is not None else rng.randrange(2, 5)):
        kind = rng.choice(["tumble", "tumble", "slide", "session", "dedup", "marks"])
        lateness = rng.choice([0, 0, 30 * S])
        if kind == "tumble":
            op = Op(kind, time, size=rng.choice([30, 60, 120]) * S, lateness=lateness)
        elif kind == "slide":
            op = Op(kind, time, size=60 * S, slide=rng.choice([20, 30]) * S, lateness=lateness)
        elif kind == "session":
            op = Op(kind, time, gap=rng.choice([20, 45]) * S, lateness=lateness)
        elif kind == "dedup":
            op = Op(kind, time, within=rng.choice([20, 60]) * S)
        else:
            op = Op(kind, time, size=rng.choice([30, 60]) * S)
        ops.append(op)
        time = (rng.choice(["window_start", "window_end"]) if kind in ("tumble", "slide", "session") else
                "t" if kind == "marks" else time)
    steps = []
    inputs = ("L", "R") if join is not None else ("S",)
    for s in range(rng.randrange(8, 13)):
        step: dict[str, list[dict[str, Any]]] = {}
        for name in inputs:
            for c in range(2 if join is None else 1):
                for _ in range(rng.randrange(2, 8)):
                    t = (s * 30 + rng.randrange(0, 30)) * S + c * 7 * S - rng.randrange(0, BOUND // 2)
                    if rng.random() < 0.08:
                        t -= rng.randrange(3 * BOUND, 300 * S)  # far behind: late somewhere
                    row: dict[str, Any] = {"k": rng.choice("abc"), "t": t, **({"v": rng.randrange(9)} if join is None
                                                                             else {})}
                    step.setdefault(f"{name}{c}", []).append(row)
        steps.append(step)
    return join, ops, steps


def by_channel(join: Join | None, steps: list[dict[str, list[dict[str, Any]]]]) -> list[list[list[dict[str, Any]]]]:
    names = ["L0", "R0"] if join is not None else ["S0", "S1"]
    return [[step.get(n, []) for n in names] for step in steps]


def reference(join: Join | None, ops: list[Op], steps: list[dict[str, list[dict[str, Any]]]]) -> Outcome:
    merged = [{name: [r for k, rows in step.items() if k.startswith(name) for r in rows]
               for name in (("L", "R") if join is not None else ("S",))} for step in steps]
    return run(join, ops, merged, watermarks(by_channel(join, steps), BOUND))


class _Marks:
    """The reference's ``marks`` as a keyed function of the runtime's API."""

    size, column = 0, "t"

    def process(self, key: tuple[Any, ...], rows: pa.Table, ctx: Any) -> None:
        for t in rows.column(self.column).cast(pa.int64()).to_pylist():  # us: a timestamp column
            ctx.timers.register_event_time((t // self.size + 1) * self.size // 1000)  # the API's ms

    def on_timer(self, key: tuple[Any, ...], timer: Any, ctx: Any) -> list[dict[str, Any]]:
        return [{"k": key[0], "t": timer.time * 1000 - self.size}]


def _operator(i: int, op: Op) -> Operator:
    name = f"op{i}"
    if op.kind in ("tumble", "slide"):
        window = WindowSpec("tumbling" if op.kind == "tumble" else "sliding", op.time, size_us=op.size,
                            slide_us=op.slide or op.size, allowed_lateness_us=op.lateness)
        return WindowOperator(name, AggregateOp(("k",), (Aggregation("n", "count"),), window=window))
    if op.kind == "session":
        window = WindowSpec("session", op.time, gap_us=op.gap, allowed_lateness_us=op.lateness)
        return SessionOperator(name, AggregateOp(("k",), (Aggregation("n", "count"),), window=window))
    if op.kind == "dedup":
        return Deduplicate(name, DeduplicateOp(("k",), op.within, op.time))
    marks = type("Marks", (_Marks,), {"size": op.size, "column": op.time})
    spec = ProcessOp("Marks", ("k",), (("k", "string"), ("t", "timestamp")))
    return ProcessOperator(name, spec, SimpleNamespace(Marks=marks))


def _table(rows: list[dict[str, Any]], columns: tuple[str, ...] = ("k", "t")) -> pa.Table:
    if not rows:
        return pa.table({c: pa.array([], pa.string() if c == "k" else TIME if c in TIMES else pa.int64())
                         for c in columns})
    columns = sorted(rows[0])
    return pa.table({c: pa.array([r[c] for r in rows], TIME if c in TIMES else None) for c in columns})


def _rows(table: pa.Table | None) -> list[dict[str, Any]]:
    if table is None:
        return []
    table = plain(table)
    table = table.select([c for c in table.column_names if c not in ("late_reason", "late_input")])
    exact = [table.column(c).cast(pa.int64()) if pa.types.is_timestamp(table.schema.field(c).type) else table.column(c)
             for c in table.column_names]  # microseconds, exactly
    return pa.table(exact, names=table.column_names).to_pylist()


def runtime(join: Join | None, ops: list[Op], steps: list[dict[str, list[dict[str, Any]]]],
            tmp: Path) -> tuple[Outcome, list[int | None]]:
    """The chain through the runtime's operators, with the runtime's watermark; and the watermarks it ran with."""
    names = ["L0", "R0"] if join is not None else ["S0", "S1"]
    sources = [StageSpec(n, StageKind.SOURCE, 1, file=FileSource(Path("in"), "jsonl", 10),
                         event_time=EventTime("t", BOUND)) for n in names]
    marks = Watermarks(sources, lambda: 0.0)
    backend = make_backend("memory", tmp)
    stages: list[tuple[Operator, int]] = []
    sides: dict[str, list[tuple[int, Operator, Holder]]] = {"L": [], "R": []}  # each side's own operators
    if join is not None:
        for side, side_ops in (("L", join.left), ("R", join.right)):
            for op in side_ops:
                operator = _operator(len(sides["L"]) + len(sides["R"]), op)
                sides[side].append((len(sides["L"]) + len(sides["R"]), operator,
                                    Holder(backend, operator.keys, operator.index)))
        stages.append((IntervalJoin(f"op{len(sides['L']) + len(sides['R'])}", JoinOp(
            join.kind, ("k",), "L", "R", join.lower, join.upper, join.left_time, join.right_time)), 0))
    hold = join.hold if join is not None else 0
    first = len(sides["L"]) + len(sides["R"])  # the number of the join (or of the first operator)
    for i, op in enumerate(ops, start=first + len(stages)):
        stages.append((_operator(i, op), hold))
    holders = [Holder(backend, operator.keys, operator.index) for operator, _ in stages]
    outcome, used = Outcome(), []
    for s in range(1, len(steps) + 2):
        rows = steps[s - 1] if s <= len(steps) else {}
        before = marks.before(s)
        wm = marks.next() if s <= len(steps) else END_OF_INPUT
        marks.record(s, wm)
        used.append(wm)
        if join is not None:
            current: dict[str, pa.Table] = {}
            for side in ("L", "R"):
                table = _table(rows.get(f"{side}0", []))
                for i, operator, holder in sides[side]:
                    clock = StepClock(wm, before=before)
                    done = _step(operator, holder, {"": table}, clock,
                                 StepContext(s, clock.watermark, where="op.0", now=0), timed=True)
                    for r in _rows(done.late):
                        outcome.late.append((i, s, r, int(r.pop("late_watermark"))))
                    out = together(done.early, done.after)
                    table = out if out is not None else _table([], join.columns(side))
                current[side] = table
        else:
            current = {"": _table(rows.get("S0", []) + rows.get("S1", []))}
        for i, ((operator, lag), holder) in enumerate(zip(stages, holders), start=first):
            clock = StepClock(held(wm, lag), before=held(before, lag))
            done = _step(operator, holder, current, clock, StepContext(s, clock.watermark, where="op.0", now=0),
                         timed=True)
            for r in _rows(done.late):
                missed = int(r.pop("late_watermark"))
                outcome.late.append((i, s, r, missed))
            out = together(done.early, done.after)
            current = {"": out if out is not None else _table([])}
        outcome.rows += [(s, r) for r in _rows(current[""])]
        for n in names:
            got = rows.get(n, [])
            if got:
                marks.observe(Channel(n, 0), s, max(r["t"] for r in got), len(got))
    return outcome, used


def canonical(outcome: Outcome) -> tuple[Counter[Any], Counter[Any]]:
    """What both sides are compared on: each emitted row with its step, each late row with its operator, step
    and the watermark it missed (columns the runtime adds for its own use left out)."""
    def key(row: dict[str, Any]) -> tuple[Any, ...]:
        return tuple(sorted((c, v) for c, v in row.items() if not c.startswith("__")))
    return (Counter((s, key(r)) for s, r in outcome.rows),
            Counter((i, s, key(r), wm) for i, s, r, wm in outcome.late))
