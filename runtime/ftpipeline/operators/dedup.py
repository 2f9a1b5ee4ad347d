"""Deduplication within an event-time horizon, over the channel's keyed state (Spark's
``dropDuplicatesWithinWatermark``).

The state holds one row per key seen: when its entry expires, the event time
of the first record that passed plus ``within``, by which it is indexed
(``KeyedState.expire``). A step with watermark W:

1. rows with a null key or event time are dead letters;
2. entries that expire at or before W leave the state (the watermark comes
   before the step's records);
3. a row whose event time is behind W is late: the entry that would tell
   whether it repeats an earlier record may be gone. It goes to the
   late-data output;
4. of the on-time rows of a key, one passes: the smallest by event time,
   then by the other columns in name order (so the choice does not depend on
   the order rows arrived in, and a replay makes the same one); it passes
   only if the state holds no entry for its key, and then leaves one.

So two records of a key less than ``within`` apart in event time never both
pass, and what passes depends only on the steps' rows and recorded
watermarks, through any recovery.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ftpipeline.operators.base import Emitted, Holder, StepContext
from ftpipeline.operators.late import late_rows
from ftpipeline.operators.rows import usable
from ftpipeline.spec.model import DeduplicateOp
from ftpipeline.state.backend import STEP, KeyedState

EXPIRES = "__ftp_expires"
TS, ROW = "__ftp_ts", "__ftp_row"


def _sortable(kind: pa.DataType) -> bool:
    return bool(pa.types.is_primitive(kind) or pa.types.is_string(kind) or pa.types.is_large_string(kind)
                or pa.types.is_binary(kind) or pa.types.is_large_binary(kind) or pa.types.is_temporal(kind))


def tie_breakers(schema: pa.Schema, keys: tuple[str, ...]) -> list[str]:
    """The columns that order a key's rows after their event time: every other sortable one, by name."""
    return sorted(f.name for f in schema if f.name not in keys and _sortable(f.type))


class Deduplicate:
    def __init__(self, stage: str, op: DeduplicateOp) -> None:
        self.stage, self.op = stage, op
        self.keys = list(op.keys)
        self.index: str | None = EXPIRES
        self.folds_at_once = False  # what passes depends on each step's watermark
        self.by_input = False

    def evict(self, state: KeyedState, step: int) -> int:
        return 0  # entries leave when the watermark passes them

    def process(self, state: Holder, table: pa.Table, ctx: StepContext) -> Emitted:
        out = Emitted()
        rows, ts, out.dead = usable(table, self.op.keys, self.op.time_column,
                                    f"stage {self.stage!r} deduplicate.timeColumn", ctx.where)
        held = state.get()
        if held is not None and ctx.watermark is not None:
            out.evicted = held.expire(min(ctx.watermark, 2**63 - 2) + 1).num_rows
        if ctx.watermark is not None:
            on_time = pc.greater_equal(ts, ctx.watermark)
            late = rows.filter(pc.invert(on_time))
            if late.num_rows and ctx.emit:
                out.late = late_rows(late, ctx.watermark, "behind the watermark: whether it repeats an earlier "
                                                          "record can no longer be told")
            rows, ts = rows.filter(on_time), ts.filter(on_time)
        first = self._first_per_key(rows.append_column(TS, ts))
        if held is None and first.num_rows:
            fields = [rows.schema.field(k) for k in self.op.keys]
            held = state.create(pa.schema([*fields, pa.field(EXPIRES, pa.int64()), pa.field(STEP, pa.int64())]))
        passed = first
        if held is not None and first.num_rows:
            known = held.get(first.select(list(self.op.keys)))
            passed = first.filter(pc.is_null(known.column(EXPIRES)))
            entries = passed.select(list(self.op.keys)).append_column(
                EXPIRES, pc.add(passed.column(TS), self.op.within_us)).append_column(
                STEP, pa.array(np.full(passed.num_rows, ctx.step, np.int64)))
            held.put(entries)
        if ctx.emit:
            out.rows = passed.drop_columns([TS])
        return out

    def _first_per_key(self, rows: pa.Table) -> pa.Table:
        order: list[tuple[str, Any]] = [(k, "ascending") for k in self.op.keys]
        order += [(TS, "ascending")] + [(c, "ascending") for c in tie_breakers(rows.schema, (*self.op.keys, TS))]
        ranked = rows.sort_by(order)
        ranked = ranked.append_column(ROW, pa.array(np.arange(ranked.num_rows), pa.int64()))
        firsts = ranked.group_by(list(self.op.keys), use_threads=False).aggregate([(ROW, "min")])
        picked = pc.sort_indices(firsts.column(f"{ROW}_min"))
        return ranked.take(pc.take(firsts.column(f"{ROW}_min"), picked)).drop_columns([ROW])
