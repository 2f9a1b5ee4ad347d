"""A reference interpreter of event time as Flink orders it: a chain of operators, one record at a time.

Why: the runtime takes a step's rows in batches, two calls per operator where
some came before the watermark's advance (``eventtime/order.py``), and the
oracle (``expected.py``) recomputes the same rules in Spark. Both are built
around the runtime's batching. This interpreter is not: it is the textbook
dataflow of Flink, plain Python, no Arrow, no state backend, no steps inside
an operator. Each operator reads one stream of events and writes one:

- a row: it takes it against its current watermark (late, or kept, or
  paired) and emits what that makes at once;
- a watermark W: it advances (windows fire, sessions close, held join rows
  leave, timers fire), emits what that makes, then forwards W — less an
  interval join's hold, ``max(upper, -lower)`` — downstream.

The sources emit, per step S, the watermark W(S) first (each channel's
newest event time of the steps before S less the bound, the minimum over
channels, never going back; unknown until every channel has read a record;
the end of input after the last step), then S's records. The rows an
operator takes between two watermarks within one step are taken in order of
(event time, then their other columns), which is the order the runtime's
choices among a step's rows follow.

The rules of each operator are the documented ones (README, each operator's
docstring): a window's pair is late when its window fires (end plus
lateness) at or before the watermark; a session's row when its own session
does (Spark's rule); a deduplicated or joined row when it is behind the
watermark. ``tests/unit/eventtime/test_reference.py`` runs random chains of
these through the runtime's operators and compares every emitted row, its
step and every late row.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from ftpipeline.eventtime.columns import END_OF_INPUT

Row = dict[str, Any]     # event times as int microseconds


@dataclass(frozen=True)
class Op:
    """One keyed (on ``k``) operator of a chain, reading its event time from ``time``."""

    kind: str            # tumble | slide | session | dedup | marks (a keyed function: a row per key and bucket)
    time: str
    size: int = 0        # tumble, slide; marks: the bucket
    slide: int = 0
    gap: int = 0         # session
    lateness: int = 0    # tumble, slide, session
    within: int = 0      # dedup


@dataclass(frozen=True)
class Join:
    """An interval join of two sources (``L`` and ``R``, rows ``{k, t}``) heading a chain, each side after its own
    operators (``left``, ``right``: none, or e.g. a window, whose rows it then joins on ``left_time`` /
    ``right_time``). Its rows: the key, each side's other columns, a name both sides have prefixed ``left_`` /
    ``right_`` (the runtime's rule); an unmatched left row of a left join has the right's columns null."""

    kind: str            # inner | left
    lower: int
    upper: int
    left: tuple[Op, ...] = ()
    right: tuple[Op, ...] = ()
    left_time: str = "t"
    right_time: str = "t"

    @property
    def hold(self) -> int:
        return max(self.upper, -self.lower, 0)

    def columns(self, side: str) -> tuple[str, ...]:
        """The columns a side's rows have when they reach the join."""
        ops = self.left if side == "L" else self.right
        windowed = bool(ops) and ops[-1].kind in ("tumble", "slide", "session")
        return ("k", "window_start", "window_end", "n") if windowed else ("k", "t")

    def named(self, column: str, side: str) -> str:
        """What a side's column is called in the join's rows."""
        both = set(self.columns("L")) & set(self.columns("R"))
        return f"{'left' if side == 'L' else 'right'}_{column}" if column in both and column != "k" else column


@dataclass
class Outcome:
    rows: list[tuple[int, Row]] = field(default_factory=list)                  # (step, row) the chain emitted
    late: list[tuple[int, int, Row, int]] = field(default_factory=list)        # (op, step, row, watermark missed)


Event = tuple[str, Any]   # ("rows", [Row]) | ("rows L"/"rows R", [Row]) | ("wm", int | None)


def watermarks(steps: Sequence[Sequence[Sequence[Row]]], bound: int, column: str = "t") -> list[int | None]:
    """W(S) for S = 1 .. len(steps) + 1 (the last: the end of input); ``steps[s][c]``: channel c's rows of step
    s + 1, across every source."""
    out: list[int | None] = []
    newest: dict[int, int] = {}
    current: int | None = None
    for rows in steps:
        channels = len(rows)
        if len(newest) == channels:
            candidate = min(newest.values()) - bound
            current = candidate if current is None else max(current, candidate)
        out.append(current)
        for c, part in enumerate(rows):
            for r in part:
                newest[c] = max(newest.get(c, r[column]), r[column])
    out.append(END_OF_INPUT)
    return out


def run(join: Join | None, ops: Sequence[Op], steps: Sequence[dict[str, Sequence[Row]]],
        marks: Sequence[int | None]) -> Outcome:
    """The chain over ``steps`` (each: its rows per input: ``S``, or ``L`` and ``R`` for a join) with the
    sources' watermarks ``marks`` (one per step, then the end of input's)."""
    outcome = Outcome()
    events: list[tuple[int, Event]] = []
    for s, wm in enumerate(marks, start=1):
        events.append((s, ("wm", wm)))
        rows = steps[s - 1] if s <= len(steps) else {}
        for name in (("L", "R") if join is not None else ("S",)):
            events.append((s, (f"rows {name}" if join is not None else "rows", list(rows.get(name, [])))))
    at = 0
    if join is not None:
        events = _sides(join, events, outcome)
        at = len(join.left) + len(join.right)
        events = list(_joined(join, at, events, outcome))
        at += 1
    for i, op in enumerate(ops, start=at):
        events = list(_operator(i, op, events, outcome))
    for s, (kind, body) in events:
        if kind == "rows":
            outcome.rows += [(s, r) for r in body]
    return outcome


def _sorted(rows: list[Row], time: str) -> list[Row]:
    return sorted(rows, key=lambda r: (r[time], tuple((c, _sortable(r[c])) for c in sorted(r) if c != time)))


def _sortable(v: Any) -> tuple[bool, Any]:
    return (v is None, v if v is not None else 0)


def _phases(events: list[tuple[int, Event]]) -> Iterator[tuple[int, Event]]:
    """The rows between two watermarks, within one step, as one batch (what an operator takes in order of event
    time): a step's rows before its watermark (what the advance upstream emitted), then those after it."""
    rows: list[Row] = []
    step = 0
    for s, (kind, body) in events:
        if (kind == "wm" or s != step) and rows:
            yield step, ("rows", rows)
            rows = []
        step = s
        if kind == "wm":
            yield s, (kind, body)
        else:
            rows += list(body)
    if rows:
        yield step, ("rows", rows)


def _operator(i: int, op: Op, events: list[tuple[int, Event]], outcome: Outcome) -> Iterator[tuple[int, Event]]:
    state = _make(op)
    wm: int | None = None
    for s, (kind, body) in _phases(events):
        if kind == "wm":
            if body is not None:
                yield s, ("rows", state.advance(body))
                wm = body
            yield s, ("wm", body)
            continue
        out: list[Row] = []
        for r in _sorted(body, op.time):
            if r.get(op.time) is None:
                continue  # a dead letter: no event time (the tests give every row one)
            made, late = state.take(r, wm)
            out += made
            if late:
                outcome.late.append((i, s, r, wm if wm is not None else 0))
        yield s, ("rows", out)


class _Windows:
    def __init__(self, op: Op) -> None:
        self.op = op
        self.slide = op.slide or op.size
        self.open: dict[tuple[Any, int], int] = {}

    def take(self, r: Row, wm: int | None) -> tuple[list[Row], bool]:
        t, op = r[self.op.time], self.op
        last = t // self.slide * self.slide
        starts = [last - j * self.slide for j in range(op.size // self.slide)]
        kept = [b for b in starts if wm is None or b + op.size + op.lateness > wm]
        for b in kept:
            self.open[(r["k"], b)] = self.open.get((r["k"], b), 0) + 1
        return [], not kept

    def advance(self, wm: int) -> list[Row]:
        op = self.op
        fired = sorted(w for w in self.open if w[1] + op.size + op.lateness <= wm)
        return [{"k": k, "window_start": b, "window_end": b + op.size, "n": self.open.pop((k, b))} for k, b in fired]


class _Sessions:
    def __init__(self, op: Op) -> None:
        self.op = op
        self.open: dict[Any, list[list[int]]] = {}  # key -> [start, end, n]

    def take(self, r: Row, wm: int | None) -> tuple[list[Row], bool]:
        t, op = r[self.op.time], self.op
        if wm is not None and t + op.gap + op.lateness <= wm:
            return [], True
        mine = [t, t + op.gap, 1]
        kept = []
        for other in self.open.get(r["k"], []):
            if other[0] <= mine[1] and mine[0] <= other[1]:
                mine = [min(other[0], mine[0]), max(other[1], mine[1]), other[2] + mine[2]]
            else:
                kept.append(other)
        self.open[r["k"]] = [*kept, mine]
        return [], False

    def advance(self, wm: int) -> list[Row]:
        out = []
        for k in sorted(self.open, key=repr):
            for session in sorted(self.open[k]):
                if session[1] + self.op.lateness <= wm:
                    out.append({"k": k, "window_start": session[0], "window_end": session[1], "n": session[2]})
            self.open[k] = [x for x in self.open[k] if x[1] + self.op.lateness > wm]
        return out


class _Dedup:
    def __init__(self, op: Op) -> None:
        self.op = op
        self.seen: dict[Any, int] = {}  # key -> when its entry expires

    def take(self, r: Row, wm: int | None) -> tuple[list[Row], bool]:
        t = r[self.op.time]
        if wm is not None and t < wm:
            return [], True
        if r["k"] in self.seen:
            return [], False
        self.seen[r["k"]] = t + self.op.within
        return [dict(r)], False

    def advance(self, wm: int) -> list[Row]:
        self.seen = {k: e for k, e in self.seen.items() if e > wm}
        return []


class _Marks:
    """A keyed function: an event-time timer at the end of each row's bucket; a timer emits ``{k, t: bucket}``."""

    def __init__(self, op: Op) -> None:
        self.op = op
        self.timers: set[tuple[Any, int]] = set()

    def take(self, r: Row, wm: int | None) -> tuple[list[Row], bool]:
        self.timers.add((r["k"], (r[self.op.time] // self.op.size + 1) * self.op.size))
        return [], False

    def advance(self, wm: int) -> list[Row]:
        due = sorted((t for t in self.timers if t[1] <= wm), key=lambda x: (repr(x[0]), x[1]))
        self.timers -= set(due)
        return [{"k": k, "t": at - self.op.size} for k, at in due]


def _make(op: Op) -> Any:
    return {"tumble": _Windows, "slide": _Windows, "session": _Sessions, "dedup": _Dedup, "marks": _Marks}[op.kind](op)


def _sides(join: Join, events: list[tuple[int, Event]], outcome: Outcome) -> list[tuple[int, Event]]:
    """Each side's rows through its own operators (ops 0.. on the left, then the right's), and the two streams
    merged step by step as the join takes them: what each side's advance made, the watermark, each side's rows
    after it (neither side holds the watermark: both forward each one where the step has it)."""
    if not join.left and not join.right:
        return events
    streams = {}
    at = 0
    for side, ops in (("L", join.left), ("R", join.right)):
        stream: list[tuple[int, Event]] = [(s, ("rows" if kind != "wm" else kind, body)) for s, (kind, body) in events
                                           if kind == "wm" or kind == f"rows {side}"]
        for i, op in enumerate(ops, start=at):
            stream = list(_operator(i, op, stream, outcome))
        at += len(ops)
        streams[side] = stream
    marks: dict[int, Any] = {}
    # side -> step -> (its rows before the step's watermark, its rows after)
    parts: dict[str, dict[int, tuple[list[Row], list[Row]]]] = {side: {} for side in streams}
    for side, stream in streams.items():
        marked: set[int] = set()
        for step, (kind, body) in stream:
            if kind == "wm":
                marked.add(step)
                marks[step] = body
            else:
                parts[side].setdefault(step, ([], []))[step in marked].extend(body)
    merged: list[tuple[int, Event]] = []
    for s in sorted({s for s, _ in events}):
        merged += [(s, (f"rows {side}", parts[side].get(s, ([], []))[0])) for side in ("L", "R")]
        merged.append((s, ("wm", marks.get(s))))
        merged += [(s, (f"rows {side}", parts[side].get(s, ([], []))[1])) for side in ("L", "R")]
    return merged


def _joined(join: Join, at: int, events: list[tuple[int, Event]], outcome: Outcome) -> Iterator[tuple[int, Event]]:
    """The interval join (op ``at``): pairs within [lower, upper], an unmatched left row of a left join once the
    watermark passes its time plus upper."""
    held: dict[str, list[list[Any]]] = {"L": [], "R": []}  # [row, matched]
    wm: int | None = None
    times = {"L": join.left_time, "R": join.right_time}

    def expiry(side: str, r: Row) -> int:
        return int(r[times[side]] + (join.upper if side == "L" else -join.lower))

    def pair(left: Row | None, right: Row | None) -> Row:
        out: Row = {}
        for side, r in (("L", left), ("R", right)):
            for c in join.columns(side):
                if c == "k":
                    out.setdefault("k", r["k"] if r is not None else None)
                else:
                    out[join.named(c, side)] = r[c] if r is not None else None
        return out

    def alone(r: Row) -> Row:
        return pair(r, None)

    for s, (kind, body) in events:
        if kind == "wm":
            out: list[Row] = []
            if body is not None:
                for side in ("L", "R"):
                    leaving = [h for h in held[side] if expiry(side, h[0]) < body]
                    held[side] = [h for h in held[side] if expiry(side, h[0]) >= body]
                    if side == "L" and join.kind == "left":
                        out += [alone(h[0]) for h in sorted(leaving, key=lambda h: (h[0][times["L"]], h[0]["k"]))
                                if not h[1]]
                wm = body
            yield s, ("rows", out)
            yield s, ("wm", body - join.hold if body is not None and body != END_OF_INPUT else body)
            continue
        side = kind.split()[1]
        other = "R" if side == "L" else "L"
        out = []
        for r in _sorted(body, times[side]):
            if wm is not None and r[times[side]] < wm:  # a late row has both sides' columns, the other's null
                outcome.late.append((at, s, {c: r.get(c) for c in dict.fromkeys(join.columns("L") + join.columns("R"))},
                                     wm))
                continue
            mine = [r, False]
            for h in held[other]:
                left, right = (r, h[0]) if side == "L" else (h[0], r)
                if left["k"] == right["k"] and join.lower <= right[times["R"]] - left[times["L"]] <= join.upper:
                    out.append(pair(left, right))
                    mine[1] = h[1] = True
            if wm is None or expiry(side, r) >= wm:
                held[side].append(mine)
            elif side == "L" and join.kind == "left" and not mine[1]:
                out.append(alone(r))  # already past its expiry: it leaves at once
        yield s, ("rows", out)
