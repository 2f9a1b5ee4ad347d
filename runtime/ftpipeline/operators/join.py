"""An interval join of two streams over the channel's keyed state (Flink's interval join, Spark's
time-bounded stream–stream join).

A left row L and a right row R join when their keys are equal and
``L.t + lower <= R.t <= L.t + upper``. Both inputs are hashed on the keys,
so a key's rows of both sides meet in one channel. Its state holds, per key
and side, the side's rows that could still meet a row to come: one state
row whose ``ROWS`` are those rows encoded (``state/codec.py``, each after
its length) and whose ``EXPIRES`` — the state's index — is the earliest
time one of them can leave.

No row that may still arrive is behind the watermark W (such a row is
late), so a left row can leave once ``L.t + upper < W`` and a right row once
``R.t - lower < W``. A step with watermark W (it comes before the step's
records, as for windows):

1. rows with a null key or event time are dead letters;
2. the state rows whose ``EXPIRES`` is below W are taken out; of their
   rows, those that expired leave, the others go back;
3. rows behind W are late, to the late-data output;
4. the on-time rows of each side join the other side's held rows of their
   keys and the other side's rows of this step;
5. each row that met a partner is marked matched; rows that already expired
   are not kept, the others join the held ones of their key and side.

A row leaving unmatched (2 or 5) is emitted with nulls for the other side
when its side is outer (``left``, ``right``, ``full``). So the output is,
whatever the order rows arrived in, every pair of on-time rows within the
interval, in the step the later of the two arrived, and each unmatched row
of an outer side in the first step whose watermark passes its expiry: a
function of the steps' rows and recorded watermarks alone, the same in a
replay (``oracle/joins.py`` computes it from those, in a batch job).

A row's buffered copy holds its columns, its event time (us) and whether it
matched. Per step, the cost is the held rows of the keys the step touches
and of the keys whose rows expire: a key that holds many rows within the
interval is decoded whole each time a row of it arrives.
"""

from __future__ import annotations

import base64

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ftpipeline.operators.base import Emitted, Holder, StepContext
from ftpipeline.operators.late import late_rows
from ftpipeline.operators.rows import usable
from ftpipeline.spec.model import JoinOp
from ftpipeline.state.backend import STEP, KeyedState
from ftpipeline.state.codec import RowCodec

SIDE, ROWS, EXPIRES = "__ftp_side", "__ftp_rows", "__ftp_expires"
TS, MATCHED = "__ftp_ts", "__ftp_matched"
LEFT, RIGHT = 0, 1
LATE_INPUT = "late_input"  # which input a late record came from
_NAMES = ("left", "right")
_LAST = 2**63 - 2


class IntervalJoin:
    by_input = True          # reads each input's rows apart (StepContext.inputs)
    folds_at_once = False    # what leaves depends on each step's watermark

    def __init__(self, stage: str, op: JoinOp) -> None:
        self.stage, self.op = stage, op
        self.keys = [*op.keys, SIDE]
        self.index: str | None = EXPIRES
        self._codecs: dict[int, RowCodec] = {}

    def evict(self, state: KeyedState, step: int) -> int:
        return 0  # rows leave when the watermark passes them

    # --- a step -------------------------------------------------------------
    def process(self, state: Holder, table: pa.Table, ctx: StepContext) -> Emitted:
        op, out, w = self.op, Emitted(), ctx.watermark
        sides: list[pa.Table] = []
        for name, column in ((op.left, op.left_time), (op.right, op.right_time)):
            rows, ts, dead = usable(ctx.inputs[name], op.keys, column, f"stage {self.stage!r} join.timeColumn",
                                    ctx.where)
            out.dead += dead
            sides.append(rows.append_column(TS, ts).append_column(MATCHED, pa.array(np.zeros(rows.num_rows, bool))))
        self._check_keys(sides)
        row_schemas = [t.schema for t in sides]
        held = state.get()
        gone: list[list[pa.Table]] = [[], []]  # rows that left the state as the watermark advanced
        passed: list[list[pa.Table]] = [[], []]  # rows of this step that never entered it (already expired)
        if held is not None and w is not None:
            taken = held.expire(min(w, _LAST))
            for side in (LEFT, RIGHT):
                rows = self._decode(side, taken.filter(pc.equal(taken.column(SIDE), side)), held.schema, row_schemas)
                leaving = pc.less(self._expiry(side, rows), w)
                gone[side].append(rows.filter(leaving))
                out.evicted += int(pc.sum(leaving).as_py() or 0)
                self._put(held, side, rows.filter(pc.invert(leaving)), ctx.step)
        late: list[pa.Table] = []
        if w is not None:
            for side, rows in enumerate(sides):
                on_time = pc.greater_equal(rows.column(TS), w)
                late.append(late_rows(rows.filter(pc.invert(on_time)).drop_columns([TS, MATCHED]), w,
                                      "behind the watermark: a row it would join may already have left"))
                late[-1] = late[-1].append_column(LATE_INPUT, pa.array([(op.left, op.right)[side]] * late[-1].num_rows,
                                                                       pa.string()))
                sides[side] = rows.filter(on_time)
        keys = list(op.keys)
        touched = _distinct(pa.concat_tables([t.select(keys) for t in sides]))
        if held is None and touched.num_rows:
            held = state.create(self._schema(touched.schema, row_schemas))
        if held is not None and touched.num_rows:
            old = self._fetch(held, touched, row_schemas)
        else:
            old = [t.slice(0, 0) for t in sides]
        pairs = self._pairs(old, sides)
        for side in (LEFT, RIGHT):
            rows = pa.concat_tables([old[side], sides[side]])
            if w is not None:
                expired = pc.less(self._expiry(side, rows), w)
                passed[side].append(rows.filter(expired))
                rows = rows.filter(pc.invert(expired))
            if held is not None and touched.num_rows:
                self._replace(held, side, touched, rows, ctx.step)
        if ctx.emit:
            out.rows, out.fired = self._output(pairs, passed, row_schemas), self._output([], gone, row_schemas)
            if late and (late[LEFT].num_rows or late[RIGHT].num_rows):  # both sides' columns, whichever is late
                out.late = pa.concat_tables(late, promote_options="permissive")
        return out

    # --- the join itself ------------------------------------------------------
    def _pairs(self, old: list[pa.Table], new: list[pa.Table]) -> list[tuple[pa.Table, pa.Table]]:
        """Every pair a step makes, as aligned left and right rows: its new left rows with every right row of
        their keys, the held left rows with the new right rows. Rows that met a partner are marked
        matched, in place in ``old`` and ``new``."""
        found = []
        hits: dict[tuple[int, int], list[pa.Array]] = {}
        for (lo, ro) in ((1, 0), (1, 1), (0, 1)):
            left, right = (old, new)[lo][LEFT], (old, new)[ro][RIGHT]
            if not left.num_rows or not right.num_rows:
                continue
            lids, rids = self._matches(left, right)
            if not len(lids):
                continue
            found.append((left.take(lids), right.take(rids)))
            hits.setdefault((LEFT, lo), []).append(lids)
            hits.setdefault((RIGHT, ro), []).append(rids)
        for (side, which), ids in hits.items():
            tables = (old, new)[which]
            tables[side] = _mark(tables[side], ids)
        return found

    def _matches(self, left: pa.Table, right: pa.Table) -> tuple[pa.Array, pa.Array]:
        """Row numbers of the pairs of ``left`` and ``right`` rows: equal keys, within the interval."""
        keys = list(self.op.keys)
        a = left.select(keys).append_column(_L, pa.array(np.arange(left.num_rows), pa.int64())) \
            .append_column(_LT, left.column(TS))
        b = right.select(keys).append_column(_R, pa.array(np.arange(right.num_rows), pa.int64())) \
            .append_column(_RT, right.column(TS))
        joined = a.join(b, keys, join_type="inner", use_threads=False)
        gap = pc.subtract(joined.column(_RT), joined.column(_LT))
        joined = joined.filter(pc.and_(pc.greater_equal(gap, self.op.lower_us), pc.less_equal(gap, self.op.upper_us)))
        return joined.column(_L).combine_chunks(), joined.column(_R).combine_chunks()

    def _output(self, pairs: list[tuple[pa.Table, pa.Table]], gone: list[list[pa.Table]],
                schemas: list[pa.Schema]) -> pa.Table:
        """Rows of the step: ``pairs``, then each unmatched row of an outer side among ``gone``, with nulls for
        the other side; columns: the keys, the left's others, the right's others (a name both have, prefixed).
        What the watermark's advance released goes downstream ahead of it (``Emitted.fired``), the rest after."""
        keys = list(self.op.keys)
        columns = [[f.name for f in schemas[s] if f.name not in (*keys, TS, MATCHED)] for s in (LEFT, RIGHT)]
        both = set(columns[LEFT]) & set(columns[RIGHT])
        named = [[(c, f"{_NAMES[s]}_{c}" if c in both else c) for c in columns[s]] for s in (LEFT, RIGHT)]
        fields = [schemas[LEFT].field(k) for k in keys]
        fields += [schemas[s].field(c).with_name(n) for s in (LEFT, RIGHT) for c, n in named[s]]
        schema = pa.schema([f.with_nullable(True) for f in fields])
        parts = []
        for left, right in pairs:
            arrays = [left.column(k) for k in keys] + [left.column(c) for c, _ in named[LEFT]]
            arrays += [right.column(c) for c, _ in named[RIGHT]]
            parts.append(pa.Table.from_arrays(arrays, schema=schema))
        for s in (LEFT, RIGHT):
            if self.op.kind not in ("full", _NAMES[s]) or not gone[s]:
                continue
            rows = pa.concat_tables(gone[s])
            rows = rows.filter(pc.invert(rows.column(MATCHED)))
            mine = {n: rows.column(c) for c, n in named[s]}
            arrays = [rows.column(k) for k in keys]
            arrays += [mine[f.name] if f.name in mine else pa.nulls(rows.num_rows, f.type) for f in fields[len(keys):]]
            parts.append(pa.Table.from_arrays(arrays, schema=schema))
        return pa.concat_tables(parts) if parts else schema.empty_table()

    def _expiry(self, side: int, rows: pa.Table) -> pa.Array:
        """When each of a side's rows can leave: no row still to come could meet it after that."""
        bound = self.op.upper_us if side == LEFT else -self.op.lower_us
        return pc.add(rows.column(TS), bound)

    def _check_keys(self, sides: list[pa.Table]) -> None:
        for key in self.op.keys:
            a, b = sides[LEFT].schema.field(key).type, sides[RIGHT].schema.field(key).type
            if a != b:
                raise ValueError(f"stage {self.stage!r} join.keys: {key!r} is {a} in {self.op.left!r} and {b} in "
                                 f"{self.op.right!r}; cast one side (rows of one key must hash alike)")

    # --- the state ------------------------------------------------------------
    def _schema(self, keys: pa.Schema, schemas: list[pa.Schema]) -> pa.Schema:
        """The state's: a row per key and side, the side's rows encoded; each side's row schema kept in the
        metadata, so a restored state decodes what it holds."""
        meta = {_NAMES[s].encode(): base64.b64encode(schemas[s].serialize().to_pybytes()) for s in (LEFT, RIGHT)}
        return pa.schema([*keys, pa.field(SIDE, pa.int8()), pa.field(ROWS, pa.binary()),
                          pa.field(EXPIRES, pa.int64()), pa.field(STEP, pa.int64())], metadata=meta)

    def _codec(self, side: int, state: pa.Schema, schemas: list[pa.Schema]) -> RowCodec:
        """How a side's rows are encoded: the schema the state was created with (this step's, before)."""
        codec = self._codecs.get(side)
        if codec is None:
            stored = (state.metadata or {}).get(_NAMES[side].encode())
            schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(stored))) if stored else schemas[side]
            codec = self._codecs[side] = RowCodec(schema)
        return codec

    def _decode(self, side: int, found: pa.Table, state: pa.Schema, schemas: list[pa.Schema]) -> pa.Table:
        blobs = [b for b in found.column(ROWS).to_pylist() if b] if found.num_rows else []
        rows = self._codec(side, state, schemas).decode_prefixed(blobs)
        return rows.select(schemas[side].names).cast(schemas[side]) if rows.schema != schemas[side] else rows

    def _fetch(self, held: KeyedState, touched: pa.Table, schemas: list[pa.Schema]) -> list[pa.Table]:
        """The rows held for the ``touched`` keys, per side."""
        n = touched.num_rows
        wanted = pa.concat_tables([touched.append_column(SIDE, pa.array(np.full(n, s, np.int8))) for s in
                                   (LEFT, RIGHT)])
        found = held.get(wanted)
        return [self._decode(s, found.slice(s * n, n), held.schema, schemas) for s in (LEFT, RIGHT)]

    def _put(self, held: KeyedState, side: int, rows: pa.Table, step: int) -> None:
        """``rows`` (of one side, grouped by key here) become the held rows of their keys: sorted by key (stably:
        a key's rows keep their order), encoded end to end, and each key's run of bytes cut out as its value."""
        if not rows.num_rows:
            return
        codec = self._codec(side, held.schema, [rows.schema, rows.schema])
        keys = list(self.op.keys)
        rows = rows.take(pc.sort_indices(rows.select(keys), sort_keys=[(k, "ascending") for k in keys]))
        n = rows.num_rows
        first = np.zeros(n, bool)  # where a key's run begins
        first[0] = True
        for key in keys:
            column = rows.column(key).combine_chunks()
            first[1:] |= pc.not_equal(column.slice(1), column.slice(0, n - 1)).fill_null(True).to_numpy(
                zero_copy_only=False)
        starts = np.flatnonzero(first)
        encoded = codec.encode_array(rows.select(codec.schema.names).cast(codec.schema), prefixed=True)
        wide = pa.types.is_large_binary(encoded.type)
        offsets = np.frombuffer(encoded.buffers()[1], np.int64 if wide else np.int32)[
            encoded.offset:encoded.offset + n + 1].astype(np.int64)
        data = encoded.buffers()[2].slice(int(offsets[0]), int(offsets[-1] - offsets[0]))
        bounds = np.append(offsets[starts], offsets[-1]) - offsets[0]
        blobs = pa.Array.from_buffers(pa.large_binary(), len(starts), [None, pa.py_buffer(bounds), data])
        expires = np.minimum.reduceat(self._expiry(side, rows).to_numpy(), starts)
        g = len(starts)
        held.put(rows.take(pa.array(starts)).select(keys).append_column(SIDE, pa.array(np.full(g, side, np.int8)))
                 .append_column(ROWS, pc.cast(blobs, pa.binary()))
                 .append_column(EXPIRES, pa.array(expires, pa.int64()))
                 .append_column(STEP, pa.array(np.full(g, step, np.int64))))

    def _replace(self, held: KeyedState, side: int, touched: pa.Table, rows: pa.Table, step: int) -> None:
        """The touched keys' rows of ``side`` are now ``rows``: put those, delete the keys left with none."""
        self._put(held, side, rows, step)
        keys = list(self.op.keys)
        empty = touched if not rows.num_rows else touched.join(_distinct(rows.select(keys)), keys,
                                                               join_type="left anti", use_threads=False)
        if empty.num_rows:
            held.delete(empty.select(keys).append_column(SIDE, pa.array(np.full(empty.num_rows, side, np.int8))))


_L, _LT, _R, _RT = "__ftp_l", "__ftp_lt", "__ftp_r", "__ftp_rt"


def _mark(rows: pa.Table, ids: list[pa.Array]) -> pa.Table:
    """``rows`` with those numbered ``ids`` (row positions) marked matched."""
    hit = np.zeros(rows.num_rows, bool)
    for a in ids:
        hit[a.to_numpy(zero_copy_only=False)] = True
    at = rows.schema.get_field_index(MATCHED)
    return rows.set_column(at, MATCHED, pc.or_(rows.column(MATCHED), pa.array(hit)))


def _distinct(keys: pa.Table) -> pa.Table:
    return keys.group_by(keys.schema.names, use_threads=False).aggregate([]) if keys.num_rows else keys
