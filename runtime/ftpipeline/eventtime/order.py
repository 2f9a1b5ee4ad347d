"""Which rows of a step came before its watermark's advance: Flink's order, carried between operators.

Why: a step S runs with one recorded watermark W(S), decided before its
records. What an operator emits *because* the watermark advanced to W(S) —
a window fired, a session closed, an outer join's row released, a timer
fired — Flink forwards *before* that advance, so the operator downstream
judges it against the watermark it still has, W(S-1). Judged against W(S),
the last minute of every five-minute window fed by a one-minute window
would be late by construction.

So every row between operators is of one of two kinds:

- **early**: it reached the operator before the advance to W(S). Rows the
  advance emitted, and rows an operator emitted while taking early rows;
- **after** (the default): it came after the advance. A source's records
  (W(S) is computed from the steps before S, so it precedes them) and what
  an operator emits while taking them.

An operator with event time takes a step in Flink's order
(``worker/states.py``)::

    early rows, judged against W(S-1)  -->  advance to W(S): fire  -->  rows after, judged against W(S)
    (what they emit: early)                 (what it emits: early)      (what they emit: after)

W(S-1) is recorded with the step (``StepClock.before``), so a re-run, a
rebuild and a replay make the same split. One stage more downstream, the
same holds again: a chain of any depth keeps the rows Flink keeps.

Each operator's watermark follows from the step's and the graph: an
interval join passes on a watermark held back by ``max(upper, -lower)``
(Flink's interval join emits its watermark that much late), since a row it
emits may be as old as a partner waited (``Graph.held_back_us``, :func:`held`).

A row's kind travels with it as the boolean column :data:`EARLY`, present
only in a table (an object between tasks) that holds an early row, so
pipelines without chained event time carry nothing. The executor takes it
off before the user's functions or a sink see the rows and runs a chain's
functions over each kind apart (``worker/executor.py``).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ftpipeline.eventtime.columns import END_OF_INPUT

EARLY = "__ftp_early"


def held(watermark: int | None, by_us: int) -> int | None:
    """A watermark held back by ``by_us`` (an interval join's output: ``Graph.held_back_us``); the end of the
    input stays the end."""
    if watermark is None or watermark == END_OF_INPUT or not by_us:
        return watermark
    return watermark - by_us


def has_early(table: pa.Table | None) -> bool:
    return table is not None and table.schema.get_field_index(EARLY) >= 0


def apart(table: pa.Table) -> tuple[pa.Table, pa.Table]:
    """(the early rows, the rows after), both without :data:`EARLY` (a null mark: after)."""
    at = table.schema.get_field_index(EARLY)
    if at < 0:
        return table.slice(0, 0), table
    mark = pc.fill_null(table.column(at), False)
    plain = table.remove_column(at)
    return plain.filter(mark), plain.filter(pc.invert(mark))


def plain(table: pa.Table) -> pa.Table:
    """``table``'s rows of both kinds as one, in their order, without :data:`EARLY`."""
    at = table.schema.get_field_index(EARLY)
    return table if at < 0 else table.remove_column(at)


def together(early: pa.Table | None, after: pa.Table | None) -> pa.Table | None:
    """One table of both kinds, early rows first, marked when there is one (None: neither given)."""
    if early is None or early.num_rows == 0:
        if after is not None or early is None:
            return after
        return early  # only an empty early table: its schema is the output's
    marked = early.append_column(EARLY, pa.array(np.ones(early.num_rows, bool)))
    if after is None or after.num_rows == 0:
        return marked
    after = after.append_column(EARLY, pa.array(np.zeros(after.num_rows, bool)))
    return pa.concat_tables([marked, after], promote_options="permissive")


def early_only(table: pa.Table) -> bool:
    """Is every row of ``table`` early (and there is one)?"""
    at = table.schema.get_field_index(EARLY)
    return at >= 0 and table.num_rows > 0 and bool(pc.all(pc.fill_null(table.column(at), False)).as_py())
