"""Session windows per key, over the channel's keyed state: windows whose bounds the records make.

A record at event time t opens the session ``[t, t + gap)``; sessions of one
key that overlap or touch are one, from their first record to their last
plus the gap, so a record that falls between two sessions merges them (as
Spark's ``session_window`` and Flink's ``EventTimeSessionWindows`` do). A
session fires when the watermark reaches its end plus ``allowedLateness``.

State, in the same keyed state as every operator (``state/``), keyed by
(key, session start):

- one row per open session: its partial aggregates, its end (``SEND``)
  and its firing time (``FIRE``, the state's index, as a window's);
- one head row per key with open sessions, at start ``HEAD``: the
  sessions' ``(start, end)`` pairs (``SPANS``), so a step finds a key's
  sessions with one lookup. It fires with the key's last session, so a
  key leaves the state with its sessions.

A step with watermark W:

1. rows with a null key or event time go to the dead letters; a row whose
   own session ``[t, t + gap)`` fires at or before W is late (as Spark
   drops a row whose session window ends behind the watermark; Flink would
   let it join an open session that covers it) and goes to the late-data
   output;
2. the step's rows are cut into sessions per key (sorted by time, a new
   session where two records are more than the gap apart) and aggregated
   with Arrow;
3. per key, those and the key's open sessions are merged as intervals; a
   merged session's rows are combined into one (at the earliest start) and
   the sessions it absorbed are deleted;
4. ``append``: the sessions that fire at or before W leave the state and
   are emitted, once, final. They leave *before* the step's rows are merged
   (steps 2 and 3 come after this one), as W comes before the step's records:
   a row that would have touched a session firing now opens a new one, as in
   Flink (Spark merges it into the session first, in its micro-batch).
   ``update``: the sessions the step touched are emitted as they stand
   (those that fire leave unemitted); a session absorbed by a merge is not retracted
   (its successor, with the merged start, is emitted), as in Spark's update
   mode.

Each step depends only on its rows, its recorded watermark and the state, so
a re-run, a rebuild step by step and a replay after a rollback make the same
sessions. Aggregations as the other windows have them; countDistinct keeps
a session's distinct values in its row (a merge is a union), so they leave
with it.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ftpipeline.operators.base import Emitted, Holder, StepContext
from ftpipeline.operators.late import late_rows
from ftpipeline.operators.rows import usable, without
from ftpipeline.operators.window import (END, FIRE, START, TS, avg_n, chosen, emitted, finals, output_schema,
                                        partials, picked_at)
from ftpipeline.spec.model import Aggregation, AggregateOp, WindowSpec
from ftpipeline.state.backend import STEP, KeyedState

HEAD = -(2**63)             # the start of a key's head row
SEND = "__ftp_end"          # a session's end: its last record's time plus the gap
SPANS = "__ftp_spans"       # a head row's sessions: (start, end) pairs of int64, packed


def _packed(spans: list[tuple[int, int]]) -> bytes:
    return np.array(spans, np.int64).reshape(-1).tobytes()


def _unpacked(blob: bytes | None) -> list[tuple[int, int]]:
    if not blob:
        return []
    flat = np.frombuffer(blob, np.int64)
    return [(int(flat[i]), int(flat[i + 1])) for i in range(0, len(flat), 2)]


class SessionOperator:
    def __init__(self, stage: str, op: AggregateOp) -> None:
        assert op.window is not None and op.window.kind == "session"
        self.stage = stage
        self.op = op
        self.window: WindowSpec = op.window
        self.gap = op.window.gap_us
        self.key_by = list(op.key_by)
        self.keys = [*op.key_by, START]
        self.index: str | None = FIRE
        self.folds_at_once = False  # what fires and what is late depends on each step's watermark
        self.by_input = False
        self.used = [*op.key_by, *(str(a.column) for a in op.aggregations if a.column)]

    def evict(self, state: KeyedState, step: int) -> int:
        return 0  # sessions leave the state when they fire

    def process(self, state: Holder, table: pa.Table, ctx: StepContext) -> Emitted:
        out = Emitted()
        whole, ts, out.dead = usable(table, self.key_by, self.window.time_column,
                                     f"stage {self.stage!r} window.timeColumn", ctx.where)
        rows = without(whole, (START, END), self.used, f"stage {self.stage!r} aggregate")  # a session's own names
        rows = rows.append_column(TS, ts)
        if ctx.watermark is not None and rows.num_rows:
            late = pc.less_equal(pc.add(ts, self.gap + self.window.allowed_lateness_us), ctx.watermark)
            if ctx.emit and pc.any(late).as_py():
                out.late = late_rows(whole.filter(late), ctx.watermark, self._reason())
            rows = rows.filter(pc.invert(late))
        schema = output_schema(table, self._partial(self._cut(rows.slice(0, 0))), self.op)
        finals: pa.Table | None = None
        held = state.get()
        if held is not None and ctx.watermark is not None:  # the watermark comes before the step's rows (Flink)
            fired = self._fire(held, ctx.watermark)
            out.evicted = fired.num_rows
            if self.window.emit == "append":
                finals = self._finals(fired, schema)
        if rows.num_rows:
            touched = self._merge(state, self._partial(self._cut(rows)), ctx.step)
            if self.window.emit == "update":
                finals = self._finals(touched, schema)
        if ctx.emit:
            out.rows, out.fired = emitted(finals, self.window, schema)
        return out

    def _reason(self) -> str:
        lateness = self.window.allowed_lateness_us
        return ("its own session (its time plus the gap" + (f", plus {lateness} us of allowed lateness" if lateness
                                                             else "") + ") ends at or before the watermark")

    # --- the step's sessions ---------------------------------------------------------
    def _cut(self, rows: pa.Table) -> pa.Table:
        """The rows sorted by key and time, each with the start of its session within the step (``START``)."""
        rows = rows.sort_by([*((k, "ascending") for k in self.key_by), (TS, "ascending")])
        ts = rows.column(TS).to_numpy(zero_copy_only=False).astype(np.int64)
        new = np.ones(len(ts), bool)
        if len(ts) > 1:
            changed = np.diff(ts) > self.gap
            for k in self.key_by:
                column = rows.column(k).combine_chunks()
                differs = pc.not_equal(column.slice(1), column.slice(0, len(column) - 1))
                changed |= differs.to_numpy(zero_copy_only=False)
            new[1:] = changed
        first = np.flatnonzero(new)
        starts = ts[first][np.cumsum(new) - 1]
        return rows.append_column(START, pa.array(starts, pa.int64()))

    def _partial(self, rows: pa.Table) -> pa.Table:
        """Per (key, session start) of the step: the partial aggregates and the session's end."""
        group = [*self.key_by, START]
        part = partials(rows, group, self.op, (TS, "max", SEND), distinct_counted=False)
        part = part.set_column(part.schema.get_field_index(SEND), SEND, pc.add(part.column(SEND), self.gap))
        for a in self.op.aggregations:
            if a.op in ("first", "last"):
                part = chosen(part, rows, a, group, TS, str(a.column))
            elif a.op == "countDistinct":
                part = self._distinct(part, rows, a, group)
        return part

    def _distinct(self, part: pa.Table, rows: pa.Table, a: Aggregation, group: list[str]) -> pa.Table:
        """countDistinct: per session its distinct values (as text), sorted, packed as a JSON list."""
        valued = rows.filter(pc.is_valid(rows.column(str(a.column))))
        values = valued.select(group).append_column("__v", pc.cast(valued.column(str(a.column)), pa.string()))
        listed = values.group_by(group, use_threads=False).aggregate([("__v", "distinct")])
        packed = pa.array([json.dumps(sorted(v)).encode() for v in listed.column("__v_distinct").to_pylist()],
                          pa.binary())
        listed = listed.select(group).append_column(a.name, packed)
        joined = part.join(listed, keys=group, join_type="left outer")
        return joined.set_column(joined.schema.get_field_index(a.name), a.name,
                                 pc.fill_null(joined.column(a.name), pa.scalar(b"[]", pa.binary())))

    # --- merging into the state -------------------------------------------------------
    def _state(self, state: Holder, part: pa.Table) -> KeyedState:
        held = state.get()
        if held is None:
            fields = [*part.schema, pa.field(SPANS, pa.binary()), pa.field(FIRE, pa.int64()),
                      pa.field(STEP, pa.int64())]
            held = state.create(pa.schema(fields))
        return held

    def _merge(self, state: Holder, part: pa.Table, step: int) -> pa.Table:
        """Merge the step's sessions into the keys' open ones; the merged sessions' rows as stored."""
        held = self._state(state, part)
        values = [f.name for f in held.schema if f.name not in (SPANS, FIRE, STEP)]
        part = part.select(values).cast(pa.schema([held.schema.field(n) for n in values]))
        part = part.sort_by([*((k, "ascending") for k in self.key_by), (START, "ascending")])
        keys = part.select(self.key_by).group_by(self.key_by, use_threads=False).aggregate([])
        heads = held.get(_at_start(keys, HEAD))
        spans = {key: _unpacked(blob) for key, blob in zip(_tuples(keys, self.key_by), heads.column(SPANS).to_pylist())}
        starts = part.column(START).to_pylist()
        ends = part.column(SEND).to_pylist()
        relabel = np.zeros(part.num_rows, np.int64)      # each partial row's merged start
        absorbed: list[tuple[Any, int, int]] = []          # (key, old start, merged start) of held sessions
        new_spans: dict[Any, list[tuple[int, int]]] = {}
        by_key: dict[Any, list[int]] = {}
        for i, key in enumerate(_tuples(part, self.key_by)):
            by_key.setdefault(key, []).append(i)
        for key, members in by_key.items():
            intervals = [(s, e, -1) for s, e in spans.get(key, [])] + [(starts[i], ends[i], i) for i in members]
            intervals.sort(key=lambda x: (x[0], x[1]))
            kept: list[tuple[int, int]] = []
            at = 0
            while at < len(intervals):
                group = [intervals[at]]
                end = intervals[at][1]
                at += 1
                while at < len(intervals) and intervals[at][0] <= end:
                    group.append(intervals[at])
                    end = max(end, intervals[at][1])
                    at += 1
                start = group[0][0]
                kept.append((start, end))
                if all(i < 0 for _, _, i in group):
                    continue  # a held session the step does not touch
                for s, _, i in group:
                    if i < 0:
                        absorbed.append((key, s, start))
                    else:
                        relabel[i] = start
            new_spans[key] = kept
        old = _rows_at(self.key_by, [(k, s) for k, s, _ in absorbed], part.schema)
        held_rows = held.get(old).select(values) if old.num_rows else part.schema.empty_table()
        held_rows = held_rows.set_column(held_rows.schema.get_field_index(START), START,
                                         pa.array([m for _, _, m in absorbed], pa.int64()))
        part = part.set_column(part.schema.get_field_index(START), START, pa.array(relabel, pa.int64()))
        merged = self._combine(pa.concat_tables([held_rows, part]))
        gone = [(k, s) for k, s, m in absorbed if s != m]
        if gone:
            held.delete(_rows_at(self.key_by, gone, part.schema))
        n = merged.num_rows
        merged = merged.append_column(SPANS, pa.nulls(n, pa.binary())).append_column(
            FIRE, pc.add(merged.column(SEND), self.window.allowed_lateness_us)).append_column(
            STEP, pa.array(np.full(n, step, np.int64)))
        held.put(merged)
        self._put_heads(held, new_spans, step)
        return merged

    def _put_heads(self, held: KeyedState, spans: dict[Any, list[tuple[int, int]]], step: int | list[int]) -> None:
        """Write the heads of ``spans``' keys (deleting those left with no session); ``step``: the step each
        was last changed in, one for all or one per key in ``spans``' order."""
        steps = step if isinstance(step, list) else [step] * len(spans)
        live = {k: v for k, v in spans.items() if v}
        live_steps = [s for (_, v), s in zip(spans.items(), steps) if v]
        if len(live) < len(spans):
            held.delete(_rows_at(self.key_by, [(k, HEAD) for k, v in spans.items() if not v], held.schema))
        if not live:
            return
        lateness = self.window.allowed_lateness_us
        table = _rows_at(self.key_by, [(k, HEAD) for k in live], held.schema)
        n = table.num_rows
        columns = {f.name: table.column(f.name) if f.name in table.column_names else pa.nulls(n, f.type)
                   for f in held.schema}
        columns[SPANS] = pa.array([_packed(v) for v in live.values()], pa.binary())
        columns[FIRE] = pa.array([max(e for _, e in v) + lateness for v in live.values()], pa.int64())
        columns[STEP] = pa.array(live_steps, pa.int64())
        held.put(pa.table(columns, schema=held.schema))

    def _combine(self, rows: pa.Table) -> pa.Table:
        """Rows of the same (key, start) as one: partial aggregates merged."""
        group = [*self.key_by, START]
        specs: list[tuple[Any, str]] = [(SEND, "max")]
        names = [SEND]
        for a in self.op.aggregations:
            if a.op in ("count", "sum", "avg"):
                specs.append((a.name, "sum"))
                names.append(a.name)
                if a.op == "avg":
                    specs.append((avg_n(a), "sum"))
                    names.append(avg_n(a))
            elif a.op in ("min", "max"):
                specs.append((a.name, a.op))
                names.append(a.name)
            elif a.op == "countDistinct":
                specs.append((a.name, "list"))
                names.append(a.name)
        grouped = rows.group_by(group, use_threads=False).aggregate(specs)
        columns: dict[str, Any] = {g: grouped.column(g) for g in group}
        produced = [i for i, c in enumerate(grouped.column_names) if c not in group]
        for name, i in zip(names, produced):
            columns[name] = grouped.column(i)
        for a in self.op.aggregations:
            if a.op == "countDistinct":
                columns[a.name] = pa.array([json.dumps(sorted(set().union(*(json.loads(b) for b in blobs)))).encode()
                                            for blobs in columns[a.name].to_pylist()], pa.binary())
        combined = pa.table(columns)
        for a in self.op.aggregations:
            if a.op in ("first", "last"):
                combined = chosen(combined, rows, a, group, picked_at(a), a.name)
        return combined.select(rows.column_names).cast(rows.schema)

    def _fire(self, held: KeyedState, watermark: int) -> pa.Table:
        """Take the sessions that fire at or before ``watermark``; the heads of their keys lose them."""
        fired = held.expire(min(watermark, 2**63 - 2) + 1)
        head = pc.equal(fired.column(START), HEAD)
        sessions = fired.filter(pc.invert(head))
        if not sessions.num_rows:
            return sessions
        gone_heads = set(_tuples(fired.filter(head), self.key_by))
        fired_starts: dict[Any, set[int]] = {}
        for key, start in zip(_tuples(sessions, self.key_by), sessions.column(START).to_pylist()):
            if key not in gone_heads:
                fired_starts.setdefault(key, set()).add(start)
        if fired_starts:
            probe = _rows_at(self.key_by, [(k, HEAD) for k in fired_starts], held.schema)
            heads = held.get(probe)
            spans = {k: [(s, e) for s, e in _unpacked(blob) if s not in fired_starts[k]]
                     for k, blob in zip(fired_starts, heads.column(SPANS).to_pylist())}
            # one write for every head; each keeps the step it was last changed in
            self._put_heads(held, spans, [int(x or 0) for x in heads.column(STEP).to_pylist()])
        return sessions

    # --- what leaves -------------------------------------------------------------------
    def _finals(self, rows: pa.Table, schema: pa.Schema) -> pa.Table:
        for a in self.op.aggregations:
            if a.op == "countDistinct":
                counts = pa.array([len(json.loads(b)) for b in rows.column(a.name).to_pylist()], pa.int64())
                rows = rows.set_column(rows.schema.get_field_index(a.name), a.name, counts)
        return finals(rows, self.op, rows.column(SEND), schema)


def _tuples(table: pa.Table, columns: list[str]) -> list[Any]:
    return list(zip(*(table.column(c).to_pylist() for c in columns))) if table.num_rows else []


def _at_start(keys: pa.Table, start: int) -> pa.Table:
    return keys.append_column(START, pa.array(np.full(keys.num_rows, start, np.int64)))


def _rows_at(key_by: list[str], pairs: list[tuple[Any, int]], schema: pa.Schema) -> pa.Table:
    """A table of (key columns, START) for ``(key tuple, start)`` pairs, typed as ``schema`` types them."""
    columns: dict[str, Any] = {k: pa.array([key[j] for key, _ in pairs], schema.field(k).type)
                               for j, k in enumerate(key_by)}
    columns[START] = pa.array([s for _, s in pairs], pa.int64())
    return pa.table(columns)
