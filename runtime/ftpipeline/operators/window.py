"""Tumbling and sliding event-time windows per key, over the channel's keyed state.

A record at event time t belongs to the windows ``[start, start + size)``
with ``start`` a multiple of ``slide`` and ``start <= t < start + size``
(one for a tumbling window, ``size / slide`` for a sliding one), aligned to
the epoch as Spark's ``window()`` and Flink's assigners align them. The
state holds one row per (key, window start): the window's partial
aggregates, and the time it fires, ``end + allowedLateness``, by which the
state is indexed (``KeyedState.expire``), as Flink keeps a timer per key
and window.

A step with watermark W:

1. rows with a null key or a null event time go to the dead letters;
2. each row is paired with its windows; a pair whose window fires at or
   before W is late (the watermark came first: the window has already
   fired or fires now without it). A row all of whose windows are late
   goes to the late-data output (as Flink's side output of late data), with
   the watermark it missed; the others count in their open windows only;
3. the pairs are aggregated per (key, window) with Arrow and merged into the
   rows of the windows they touch;
4. ``append``: every window that fires at or before W leaves the state and
   is emitted, once, final. ``update``: the windows touched are emitted with
   their values so far, and those that fire at or before W leave the state
   unemitted (they were emitted when they changed).

All of it depends only on the step's rows and its recorded watermark, so a
re-run of the step, a rebuild of the state step by step, or a replay after a
rollback makes the same windows and the same late records.

Aggregations: count, sum, min, max as a running aggregate has them; avg (a
sum and a count, divided when emitted); first and last, the value of the
row with the smallest (largest) event time, ties to the smallest (largest)
value, nulls skipped.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ftpipeline.operators.base import Emitted, Holder, StepContext
from ftpipeline.operators.late import late_rows
from ftpipeline.operators.rows import usable, without
from ftpipeline.spec.model import Aggregation, AggregateOp, WindowSpec
from ftpipeline.state.backend import STEP, KeyedState

START, END = "window_start", "window_end"   # the window's bounds, as the output names them
FIRE = "__ftp_fire"                         # when the window fires (us): the state's index
TS = "__ftp_ts"
ROW = "__ftp_row"
MARK, VALUE = "__ftp_mark", "__ftp_value"   # countDistinct: -1 and "" for a window's row, j and a value for a marker
OUT_TIME = pa.timestamp("us", tz="UTC")


def avg_n(a: Aggregation) -> str:
    return f"{a.name}__n"


def picked_at(a: Aggregation) -> str:
    return f"{a.name}__ts"


class WindowOperator:
    def __init__(self, stage: str, op: AggregateOp) -> None:
        assert op.window is not None
        self.stage = stage
        self.op = op
        self.window: WindowSpec = op.window
        self.distinct = [a for a in op.aggregations if a.op == "countDistinct"]
        self.keys = [*op.key_by, START, *((MARK, VALUE) if self.distinct else ())]
        self.index: str | None = FIRE
        self.folds_at_once = False  # what fires and what is late depends on each step's watermark
        self.by_input = False
        self.used = [*op.key_by, *(str(a.column) for a in op.aggregations if a.column)]

    def evict(self, state: KeyedState, step: int) -> int:
        return 0  # windows leave the state when they fire

    # --- one step -------------------------------------------------------------
    def process(self, state: Holder, table: pa.Table, ctx: StepContext) -> Emitted:
        out = Emitted()
        whole, ts, out.dead = usable(table, self.op.key_by, self.window.time_column,
                                     f"stage {self.stage!r} window.timeColumn", ctx.where)
        rows = without(whole, (START, END), self.used, f"stage {self.stage!r} aggregate")  # a window's own names
        rows = rows.append_column(TS, ts).append_column(ROW, pa.array(np.arange(rows.num_rows), pa.int64()))
        pairs = self._pairs(rows)
        fires = pc.add(pairs.column(START), self.window.size_us + self.window.allowed_lateness_us)
        if ctx.watermark is not None:
            on_time = pc.greater(fires, ctx.watermark)
            if ctx.emit:
                kept = pc.unique(pairs.filter(on_time).column(ROW))
                late = whole.filter(pc.invert(pc.is_in(rows.column(ROW), value_set=kept)))
                if late.num_rows:
                    out.late = self._late(late, ctx.watermark)
            pairs = pairs.filter(on_time)
        part = self._partial(pairs)
        merged = self._merge(state, part, pairs, ctx.step)
        schema = output_schema(table, part, self.op)
        finals: pa.Table | None = None
        if self.window.emit == "update" and merged is not None:
            finals = self._finals(merged, schema)
        held = state.get()
        if held is not None and ctx.watermark is not None:
            fired = held.expire(min(ctx.watermark, 2**63 - 2) + 1)
            if self.distinct:  # a window's distinct values leave with it
                fired = fired.filter(pc.equal(fired.column(MARK), -1))
            out.evicted = fired.num_rows
            if self.window.emit == "append":
                finals = self._finals(fired, schema)
        if ctx.emit:
            out.rows, out.fired = emitted(finals, self.window, schema)
        return out

    def _pairs(self, rows: pa.Table) -> pa.Table:
        """Each row once per window it belongs to, with the window's start."""
        size, slide = self.window.size_us, self.window.slide_us
        ts = rows.column(TS).to_numpy(zero_copy_only=False).astype(np.int64)
        last = (ts // slide) * slide
        k = size // slide
        if k == 1:
            return rows.append_column(START, pa.array(last, pa.int64()))
        take = np.repeat(np.arange(len(ts)), k)
        starts = last[take] - np.tile(np.arange(k, dtype=np.int64), len(ts)) * slide
        return rows.take(pa.array(take)).append_column(START, pa.array(starts, pa.int64()))

    def _late(self, late: pa.Table, watermark: int) -> pa.Table:
        lateness = self.window.allowed_lateness_us
        reason = (f"every window of this record had closed (its end plus {lateness} us of allowed lateness is at or "
                  "before the watermark)" if lateness else
                  "every window of this record had closed (its end is at or before the watermark)")
        return late_rows(late, watermark, reason)

    # --- partial aggregates and their merge ----------------------------------------
    def _partial(self, pairs: pa.Table) -> pa.Table:
        group = [*self.op.key_by, START]
        part = partials(pairs, group, self.op, ([], "count_all", "__rows"), distinct_counted=True)
        if self.distinct:
            n = part.num_rows
            part = part.append_column(MARK, pa.array(np.full(n, -1, np.int64))).append_column(
                VALUE, pa.array([""] * n, pa.string()))
        for a in self.op.aggregations:
            if a.op in ("first", "last"):
                part = chosen(part, pairs, a, group, TS, str(a.column))
        return part.drop_columns(["__rows"])

    def _merge(self, state: Holder, part: pa.Table, pairs: pa.Table, step: int) -> pa.Table | None:
        """Fold the step's partial into the windows it touches; their rows as merged (None: none touched)."""
        if part.num_rows == 0:
            return None
        reach = self.window.size_us + self.window.allowed_lateness_us
        fire = pc.add(part.column(START), reach)
        held = state.get()
        if held is None:
            schema = pa.schema([*part.schema, pa.field(FIRE, pa.int64()), pa.field(STEP, pa.int64())])
            held = state.create(schema)
        values = [f.name for f in held.schema if f.name not in (FIRE, STEP)]
        part = part.select(values).cast(pa.schema([held.schema.field(n) for n in values]))
        current = held.get(part)
        new_values = {a.name: self._new_values(held, pairs, j, a, part, step, reach)
                      for j, a in enumerate(self.distinct)}
        merged = {k: part.column(k) for k in self.keys}
        for a in self.op.aggregations:
            if a.op in ("count", "sum") or a.op == "avg":
                merged[a.name] = _add(part.column(a.name), current.column(a.name))
                if a.op == "avg":
                    merged[avg_n(a)] = _add(part.column(avg_n(a)), current.column(avg_n(a)))
            elif a.op in ("min", "max"):
                fn = pc.min_element_wise if a.op == "min" else pc.max_element_wise
                merged[a.name] = fn(part.column(a.name), current.column(a.name), skip_nulls=True)
            elif a.op == "countDistinct":
                merged[a.name] = _add(new_values[a.name], current.column(a.name))
            else:
                ts, value = _pick(a.op, part.column(picked_at(a)), part.column(a.name),
                                  current.column(picked_at(a)), current.column(a.name))
                merged[picked_at(a)], merged[a.name] = ts, value
        table = pa.table({n: merged[n] for n in values})
        table = table.append_column(FIRE, fire).append_column(STEP, pa.array([step] * table.num_rows, pa.int64()))
        held.put(table)
        return table

    def _new_values(self, held: KeyedState, pairs: pa.Table, j: int, a: Aggregation, part: pa.Table, step: int,
                    reach: int) -> pa.Array:
        """countDistinct: per row of ``part``, how many of its window's values this step the state had not
        seen; they are kept as marker rows (key, window, j, value) that fire with the window."""
        group = [*self.op.key_by, START]
        valued = pairs.filter(pc.is_valid(pairs.column(str(a.column))))
        seen = valued.select(group).append_column(VALUE, pc.cast(valued.column(str(a.column)), pa.string()))
        seen = seen.group_by([*group, VALUE], use_threads=False).aggregate([])
        markers = seen.append_column(MARK, pa.array(np.full(seen.num_rows, j, np.int64)))
        markers = markers.cast(pa.schema([held.schema.field(n) for n in markers.column_names]))
        fresh = markers.filter(pc.is_null(held.get(markers).column(FIRE)))
        n = fresh.num_rows
        fresh = fresh.append_column(FIRE, pc.add(fresh.column(START), reach)).append_column(
            STEP, pa.array(np.full(n, step, np.int64)))
        held.put(pa.table({f.name: fresh.column(f.name) if f.name in fresh.column_names else pa.nulls(n, f.type)
                           for f in held.schema}))
        counts = fresh.group_by(group, use_threads=False).aggregate([([], "count_all")])
        rows = part.select(group).append_column(ROW, pa.array(np.arange(part.num_rows), pa.int64()))
        joined = rows.join(counts, keys=group, join_type="left outer").sort_by(ROW)
        return pc.fill_null(joined.column("count_all"), 0)

    # --- what leaves -------------------------------------------------------------
    def _finals(self, rows: pa.Table, schema: pa.Schema) -> pa.Table:
        return finals(rows, self.op, pc.add(rows.column(START), self.window.size_us), schema)


def emitted(finals: pa.Table | None, window: WindowSpec, schema: pa.Schema) -> tuple[pa.Table, pa.Table]:
    """A window's (or session's) output of a step as (rows after the watermark's advance, rows it fired):
    ``append`` emits only what the advance fired, ``update`` what the step's rows changed."""
    empty = schema.empty_table()
    if finals is None:
        return empty, empty
    return (empty, finals) if window.emit == "append" else (finals, empty)


def partials(rows: pa.Table, group: list[str], op: AggregateOp, lead: tuple[Any, str, str],
             distinct_counted: bool) -> pa.Table:
    """Per group of ``rows``: ``lead`` (a column, an Arrow aggregation, its name) and the partial aggregate of each
    aggregation that merges by arithmetic (count, sum, min, max; avg as a sum and a count); countDistinct as a row
    count when ``distinct_counted``, left out otherwise; first and last left to :func:`chosen`."""
    specs: list[tuple[Any, str]] = [(lead[0], lead[1])]
    names = [lead[2]]
    for a in op.aggregations:
        if a.op == "count" or (a.op == "countDistinct" and distinct_counted):
            specs.append(([], "count_all"))
            names.append(a.name)
        elif a.op in ("sum", "min", "max"):
            specs.append((str(a.column), a.op))
            names.append(a.name)
        elif a.op == "avg":
            specs += [(str(a.column), "sum"), (str(a.column), "count")]
            names += [a.name, avg_n(a)]
    grouped = rows.group_by(group, use_threads=False).aggregate(specs)
    columns = {g: grouped.column(g) for g in group}
    produced = [i for i, c in enumerate(grouped.column_names) if c not in group]
    for name, i in zip(names, produced):
        columns[name] = grouped.column(i)
    for a in op.aggregations:
        if a.op == "sum" and pa.types.is_integer(columns[a.name].type):
            columns[a.name] = pc.cast(columns[a.name], pa.int64())
        if a.op == "avg":
            columns[a.name] = pc.cast(columns[a.name], pa.float64())
    return pa.table(columns)


def chosen(part: pa.Table, rows: pa.Table, a: Aggregation, group: list[str], ts: str, value: str) -> pa.Table:
    """first/last: ``part`` with, per group of ``rows``, the (event time, value) that is smallest (largest),
    nulls skipped (as ``picked_at(a)`` and ``a.name``)."""
    order = "ascending" if a.op == "first" else "descending"
    valued = rows.filter(pc.is_valid(rows.column(value)))
    ranked = valued.sort_by([(ts, order), (value, order)])
    picked = ranked.group_by(group, use_threads=False).aggregate([(ts, "first"), (value, "first")])
    return part.join(picked.rename_columns([*group, picked_at(a), a.name]), keys=group, join_type="left outer")


def output_schema(table: pa.Table, part: pa.Table, op: AggregateOp) -> pa.Schema:
    """A window's output: the keys, its bounds, one column per aggregation (typed as ``part``, the partial
    aggregates of ``table``, has them)."""
    fields = [table.schema.field(k) for k in op.key_by]
    fields += [pa.field(START, OUT_TIME), pa.field(END, OUT_TIME)]
    for a in op.aggregations:
        if a.op in ("count", "countDistinct"):
            fields.append(pa.field(a.name, pa.int64()))
        elif a.op == "avg":
            fields.append(pa.field(a.name, pa.float64()))
        else:
            fields.append(pa.field(a.name, part.schema.field(a.name).type))
    return pa.schema(fields)


def finals(rows: pa.Table, op: AggregateOp, end: Any, schema: pa.Schema) -> pa.Table:
    """The output rows of windows whose state rows are ``rows`` and ends ``end`` (us), sorted by key and start."""
    columns: dict[str, Any] = {k: rows.column(k) for k in op.key_by}
    columns[START] = pc.cast(rows.column(START), pa.int64()).cast(OUT_TIME)
    columns[END] = pc.cast(end, pa.int64()).cast(OUT_TIME)
    for a in op.aggregations:
        if a.op == "avg":
            n = rows.column(avg_n(a))
            columns[a.name] = pc.if_else(pc.greater(n, 0), pc.divide(pc.cast(rows.column(a.name), pa.float64()),
                                                                      pc.cast(n, pa.float64())), None)
        else:
            columns[a.name] = rows.column(a.name)
    order = [*op.key_by, START]
    return pa.table(columns).cast(schema).sort_by([(c, "ascending") for c in order])


def _add(a: Any, b: Any) -> Any:
    both = pc.add(a, b)
    return pc.if_else(pc.is_null(a), b, pc.if_else(pc.is_null(b), a, both))


def _pick(op: str, p_ts: Any, p_val: Any, c_ts: Any, c_val: Any) -> tuple[Any, Any]:
    """first: the smaller (event time, value) of the partial's and the state's; last: the larger."""
    before, less = (pc.less, pc.less) if op == "first" else (pc.greater, pc.greater)
    better = pc.or_(before(p_ts, c_ts), pc.and_(pc.equal(p_ts, c_ts), less(p_val, c_val)))
    take_part = pc.fill_null(pc.or_kleene(pc.is_null(c_ts), better), False)
    take_part = pc.and_(take_part, pc.is_valid(p_ts))
    return pc.if_else(take_part, p_ts, c_ts), pc.if_else(take_part, p_val, c_val)
