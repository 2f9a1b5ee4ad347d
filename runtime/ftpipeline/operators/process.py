"""A keyed function of the user's own, with state and timers, over the channel's keyed state (Flink's
``KeyedProcessFunction``, Spark's ``transformWithState``).

The user writes a class of the entry point::

    class FraudRule:
        def process(self, key, rows, ctx):      # each step's rows of one key
            ...
            return rows_out                     # a DataFrame, an Arrow table, a list of dicts, or None
        def on_timer(self, key, timer, ctx):    # optional: timer.time (us), timer.kind ("event"|"processing")
            ...
        def init_state(self, key, rows, ctx):   # with process.initialState: a key's rows of that table
            ...                                 # (sets state and timers before the first step)

and ``ctx`` (:class:`Context`) gives it ``step``, ``watermark`` and ``now`` (the
step's recorded watermark and processing time; every time of this API, timers
included, is **milliseconds since the epoch**, as a ``long`` event-time column
is, and as Flink's and Spark's are), ``rng`` (a generator
seeded by the stage, step and key), state handles ``value(name, ttl=)``,
``list(name, ttl=)`` and ``map(name, ttl=)`` (``ttl``: a duration such as
``"10m"`` or milliseconds, counted in processing time from each entry's last
write; an expired entry reads as absent) and ``timers`` (event-time timers
fire when the watermark reaches them, processing-time timers at the first
step whose processing time does; one set more than a day behind the
watermark, a unit mistake most likely, is said once in a warning).

**Determinism contract.** A replay after a lost worker hands the function
the same rows, watermarks and processing times (recorded with each step),
and its state as it was; so its output is the same only if it reads time
from ``ctx`` alone and randomness from ``ctx.rng`` alone (no ``time.time()``,
no ``random``, no outside service whose answer changes).

A step, the watermark W and processing time T coming before its records:

0. the first step of a fresh run (and its replays) first calls ``init_state``
   for each key of ``process.initialState`` the channel owns, in key order
   (the table read as of the step's recorded processing time);
1. rows with a null key are dead letters;
2. every key with an event-time timer at or before W, a processing-time
   timer at or before T, an entry whose TTL ran out, or rows in this step
   is loaded; per key, in key order: expired entries dropped, then its due
   event-time timers fired in time order, then its due processing-time
   timers, then ``process`` with its rows in arrival order;
   rows an operator upstream emitted before the step's advance (``eventtime/order.py``)
   come first, in a call of their own with the watermark before it, which fires
   no timer; what the timers return goes downstream ahead of the advance;
3. the key's state and timers are written back (or deleted when none).

One key's state is two rows of the channel's state (``KEY_KIND``): its
state and processing-time timers (indexed by the earliest TTL expiry or
timer, in a range of its own above :data:`PROCESSING`), and its event-time
timers (indexed by the earliest); ``KeyedState.expire`` over each range
finds the keys due. Values are pickled.
"""

from __future__ import annotations

import hashlib
import pickle
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ftpipeline.dataflow.lookup import initial_state
from ftpipeline.dataflow.murmur3 import channels
from ftpipeline.operators.base import Emitted, Holder, StepContext
from ftpipeline.operators.rows import keyed
from ftpipeline.spec.durations import micros
from ftpipeline.spec.model import ProcessOp
from ftpipeline.state.backend import STEP, KeyedState

KEY_KIND, VALUE, DUE = "__ftp_kind", "__ftp_value", "__ftp_due"
STATE, EVENT = 0, 1                  # a key's two rows: state and processing timers; event-time timers
PROCESSING = 2**62                   # processing times are indexed from here up (event times below it)
NEVER = 2**63 - 1
TYPES = {"string": pa.string(), "long": pa.int64(), "double": pa.float64(), "boolean": pa.bool_(),
         "timestamp": pa.timestamp("us", tz="UTC")}


@dataclass(frozen=True, order=True)
class Timer:
    time: int   # ms since the epoch
    kind: str   # "event" | "processing"


class UserFunctionError(RuntimeError):
    """The user's class raised, or returned what cannot be rows of its output."""


class ProcessOperator:
    by_input = False
    folds_at_once = False  # timers depend on each step's watermark and time

    def __init__(self, stage: str, op: ProcessOp, module: Any, parallelism: int = 1) -> None:
        self.stage, self.op, self.parallelism = stage, op, parallelism
        self.keys = [*op.keys, KEY_KIND]
        self.index: str | None = DUE
        self.output = pa.schema([(name, TYPES[kind]) for name, kind in op.output])
        self.function: Any = getattr(module, op.class_name)() if module is not None else None
        self.warnings: list[str] = []  # said once each, with the task's result (eventtime/watch.py)
        self._warned: set[str] = set()

    def warn(self, kind: str, message: str) -> None:
        """Say ``message`` with the next task's result, the first time this operator finds a ``kind``."""
        if kind not in self._warned:
            self._warned.add(kind)
            self.warnings.append(f"stage {self.stage!r}: {self.op.class_name}: {message}")

    def evict(self, state: KeyedState, step: int) -> int:
        return 0  # entries leave by their TTL, when their key is due

    def process(self, state: Holder, table: pa.Table, ctx: StepContext) -> Emitted:
        out = Emitted()
        keys = list(self.op.keys)
        rows, out.dead = keyed(table, keys, ctx.where)
        now = ctx.now if ctx.now is not None else 0
        held = state.get()
        loaded: dict[tuple[Any, ...], list[Any]] = {}  # key -> [state dict, processing timers, event timers]
        if held is not None and ctx.advance:  # the rows before the advance fire nothing (eventtime/order.py)
            due = []
            if ctx.watermark is not None:
                due.append(held.expire(min(ctx.watermark, PROCESSING - 1) + 1))
            due.append(held.expire(PROCESSING + now + 1, since=PROCESSING))
            for found in due:
                self._load(found, loaded)
        if ctx.step == 1 and ctx.first and (self.op.initial_delta or self.op.initial_parquet) is not None:
            self._initial(rows.schema, ctx, loaded)  # before a fresh run's first rows (and in its replays)
        groups = _groups(rows, keys)
        touched = sorted(set(groups) | set(loaded), key=_order)  # both rows of each: expire took one at most
        if held is not None and touched:
            wanted = pa.Table.from_pylist([{**dict(zip(keys, k)), KEY_KIND: kind} for k in touched for kind in
                                           (STATE, EVENT)], schema=pa.schema([*(held.schema.field(c) for c in keys),
                                                                              pa.field(KEY_KIND, pa.int8())]))
            self._load(held.get(wanted), loaded)
        emitted: list[pa.Table] = []
        fired: list[pa.Table] = []  # the timers' rows: the advance emitted them
        puts: list[tuple[tuple[Any, ...], int, bytes | None, int]] = []
        deletes: list[tuple[tuple[Any, ...], int, bytes | None, int]] = []
        for key in sorted(set(loaded) | set(groups), key=_order):
            entries, ptimers, etimers = loaded.get(key, [{}, [], []])
            call = Context(self, key, ctx, entries, ptimers, etimers)
            call.drop_expired()
            for timer in (call.due_timers() if ctx.advance else ()):
                fired += self._call(lambda: self._on_timer(key, timer, call), key)
            if key in groups:
                part = groups[key]
                handed = part.to_pandas() if self.op.rows == "pandas" else part
                emitted += self._call(lambda: self.function.process(key, handed, call), key)
            row = call.rows(ctx.step)
            (puts if row[0] is not None else deletes).append((key, STATE, row[0], row[1]))
            (puts if row[2] is not None else deletes).append((key, EVENT, row[2], row[3]))
        if held is None and puts:
            held = state.create(pa.schema([*(rows.schema.field(c) for c in keys), pa.field(KEY_KIND, pa.int8()),
                                           pa.field(VALUE, pa.binary()), pa.field(DUE, pa.int64()),
                                           pa.field(STEP, pa.int64())]))
        if held is not None:
            self._write(held, puts, deletes, ctx.step)
        if ctx.emit:
            out.rows = pa.concat_tables(emitted) if emitted else self.output.empty_table()
            out.fired = pa.concat_tables(fired) if fired else self.output.empty_table()
        return out

    def _initial(self, schema: pa.Schema, ctx: StepContext, loaded: dict[tuple[Any, ...], list[Any]]) -> None:
        """``init_state(key, rows, ctx)`` for each key of ``process.initialState`` this channel owns (hashed as
        the input is), in key order; what it sets is the key's state going into the first step."""
        field = f"stage {self.stage!r} process.initialState"
        table = initial_state(self.op, field, ctx.now or 0)
        keys = list(self.op.keys)
        absent = [k for k in keys if k not in table.column_names]
        if absent:
            raise UserFunctionError(f"{field}: the table has no column {', '.join(absent)} (process.keys)")
        try:
            for k in keys:
                table = table.set_column(table.column_names.index(k), k, table.column(k).cast(schema.field(k).type))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise UserFunctionError(f"{field}: its key columns do not cast to the stream's types: {exc}") from exc
        nulls = sum(table.column(k).null_count for k in keys)
        if nulls:
            raise UserFunctionError(f"{field}: {nulls} rows with a null key")
        owner = channels(table, keys, self.parallelism)
        if owner is None:
            raise UserFunctionError(f"{field}: keys of types {[str(schema.field(k).type) for k in keys]} cannot be "
                                    "hashed here")
        table = table.filter(pc.equal(owner, int(ctx.where.rpartition(".")[2] or 0)))
        for key, part in sorted(_groups(table, keys).items(), key=lambda kv: _order(kv[0])):
            entries, ptimers, etimers = loaded.get(key, [{}, [], []])
            call = Context(self, key, ctx, entries, ptimers, etimers)
            handed = part.to_pandas() if self.op.rows == "pandas" else part
            if self._call(lambda: self.function.init_state(key, handed, call), key):
                raise UserFunctionError(f"stage {self.stage!r}: {self.op.class_name}.init_state returned rows; it "
                                        "sets state and timers and returns nothing")
            loaded[key] = [call._entries, sorted(call.timers.processing), sorted(call.timers.event)]

    # --- calling the user's class ----------------------------------------------
    def _on_timer(self, key: tuple[Any, ...], timer: Timer, ctx: Context) -> Any:
        handler = getattr(self.function, "on_timer", None)
        if handler is None:
            raise UserFunctionError(f"stage {self.stage!r}: {self.op.class_name} set a timer but has no "
                                    "on_timer(key, timer, ctx) method")
        return handler(key, timer, ctx)

    def _call(self, call: Any, key: tuple[Any, ...]) -> list[pa.Table]:
        what = f"stage {self.stage!r}: {self.op.class_name}"
        try:
            result = call()
        except UserFunctionError:
            raise
        except Exception as exc:
            raise UserFunctionError(f"{what} raised {type(exc).__name__} for key {key!r}: {exc}") from exc
        if result is None:
            return []
        try:
            if hasattr(result, "to_pylist") and hasattr(result, "schema"):
                table = result
            elif isinstance(result, list):
                table = pa.Table.from_pylist(result)
            else:
                table = pa.Table.from_pandas(result, preserve_index=False)
        except Exception as exc:
            raise UserFunctionError(f"{what} returned {type(result).__name__}, not rows (a DataFrame, an Arrow "
                                    f"table, a list of dicts or None): {exc}") from exc
        if not table.num_rows:
            return []
        absent = [f.name for f in self.output if f.name not in table.column_names]
        if absent:
            raise UserFunctionError(f"{what} returned no column {', '.join(absent)} (process.output names it)")
        try:
            return [table.select(self.output.names).cast(self.output)]
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise UserFunctionError(f"{what}: its rows do not fit process.output: {exc}") from exc

    # --- the state ---------------------------------------------------------------
    def _load(self, found: pa.Table, into: dict[tuple[Any, ...], list[Any]]) -> None:
        keys = list(self.op.keys)
        for row in found.to_pylist():
            if row[VALUE] is None:
                continue
            key = tuple(row[k] for k in keys)
            slot = into.setdefault(key, [{}, [], []])
            if row[KEY_KIND] == STATE:
                slot[0], slot[1] = pickle.loads(row[VALUE])
            else:
                slot[2] = pickle.loads(row[VALUE])

    def _write(self, held: KeyedState, puts: list[Any], deletes: list[Any], step: int) -> None:
        keys = list(self.op.keys)
        fields = [held.schema.field(k) for k in keys]
        if deletes:
            held.delete(pa.Table.from_pylist([{**dict(zip(keys, k)), KEY_KIND: kind} for k, kind, _, _ in deletes],
                                             schema=pa.schema([*fields, pa.field(KEY_KIND, pa.int8())])))
        if puts:
            held.put(pa.Table.from_pylist(
                [{**dict(zip(keys, k)), KEY_KIND: kind, VALUE: value, DUE: due, STEP: step}
                 for k, kind, value, due in puts], schema=held.schema))


def to_ms(us: int | None) -> int | None:
    """A time of the API (milliseconds) from the runtime's (microseconds); the end of input stays the end."""
    return us if us is None or us == NEVER else us // 1000


class Context:
    """What the user's function sees of one key in one step (or one timer's firing). Its times are milliseconds
    since the epoch, as a ``long`` event-time column's, Flink's and Spark's: ``watermark`` (None before there is
    one; 2**63 - 1 at the end of input), ``now``, and every timer; inside, microseconds, as the runtime's."""

    def __init__(self, operator: ProcessOperator, key: tuple[Any, ...], step: StepContext,
                 entries: dict[str, Any], ptimers: list[int], etimers: list[int]) -> None:
        self.key, self.step = key, step.step
        self._watermark_us, self._now_us = step.watermark, step.now if step.now is not None else 0
        self.watermark, self.now = to_ms(self._watermark_us), self._now_us // 1000
        seed = hashlib.blake2b(repr((operator.stage, step.step, key)).encode(), digest_size=8).digest()
        self.rng = random.Random(int.from_bytes(seed, "big"))
        self._entries = entries
        self.timers = Timers(set(etimers), set(ptimers), self._watermark_us, operator.warn)

    # state handles
    def value(self, name: str, ttl: str | int | None = None) -> ValueState:
        return ValueState(self, name, _ttl(ttl))

    def list(self, name: str, ttl: str | int | None = None) -> ListState:
        return ListState(self, name, _ttl(ttl))

    def map(self, name: str, ttl: str | int | None = None) -> MapState:
        return MapState(self, name, _ttl(ttl))

    def _slot(self, name: str, kind: str, empty: Any) -> Any:
        held = self._entries.get(name)
        if held is None or held[0] != kind:
            if held is not None:
                raise TypeError(f"state {name!r} is a {held[0]} state, not a {kind} state")
            held = self._entries[name] = [kind, empty]
        return held

    def _expires(self, ttl: int | None) -> int | None:
        return self._now_us + ttl if ttl else None

    def drop_expired(self) -> None:
        for name, (kind, data) in list(self._entries.items()):
            if kind == "value" and data is not None and _gone(data[1], self._now_us):
                data = None
            elif kind == "list":
                data = [e for e in data if not _gone(e[1], self._now_us)]
            elif kind == "map":
                data = {k: e for k, e in data.items() if not _gone(e[1], self._now_us)}
            if data in (None, [], {}):
                del self._entries[name]
            else:
                self._entries[name] = [kind, data]

    def due_timers(self) -> Iterator[Timer]:
        """Due event-time timers, then due processing-time ones, in time order; one set during a firing and
        already due fires too."""
        while True:
            mark = self._watermark_us
            events = sorted(t for t in self.timers.event if mark is not None and t <= mark)
            if events:
                self.timers.event.discard(events[0])
                yield Timer(events[0] // 1000, "event")
                continue
            times = sorted(t for t in self.timers.processing if t <= self._now_us)
            if not times:
                return
            self.timers.processing.discard(times[0])
            yield Timer(times[0] // 1000, "processing")

    def rows(self, step: int) -> tuple[bytes | None, int, bytes | None, int]:
        """The key's two state rows (None: nothing to keep) and their index values."""
        expiries = [e for _, (kind, data) in self._entries.items() for e in _expiries(kind, data)]
        ptimers = sorted(self.timers.processing)
        state = pickle.dumps((self._entries, ptimers)) if self._entries or ptimers else None
        due = min([*expiries, *ptimers], default=None)
        etimers = sorted(self.timers.event)
        return (state, PROCESSING + due if due is not None else NEVER,
                pickle.dumps(etimers) if etimers else None, etimers[0] if etimers else NEVER)


class Timers:
    """A key's timers; times in milliseconds since the epoch (kept in microseconds)."""

    FAR_BEHIND_US = 86_400_000_000  # a timer set more than a day behind the watermark is likely a unit mistake

    def __init__(self, event: set[int], processing: set[int], watermark_us: int | None = None,
                 warn: Callable[[str, str], None] = lambda kind, message: None) -> None:
        self.event, self.processing = event, processing
        self._watermark_us, self._warn = watermark_us, warn

    def register_event_time(self, time_ms: int) -> None:
        at = int(time_ms) * 1000
        mark = self._watermark_us
        if mark is not None and mark != NEVER and at < mark - self.FAR_BEHIND_US:
            self._warn("timer-behind", f"an event-time timer was set at {int(time_ms)} ms, {(mark - at) / 86_400e6:,.1f} days "
                       f"behind the watermark ({mark // 1000} ms): it fires at once; timers are milliseconds since "
                       "the epoch")
        self.event.add(at)

    def register_processing_time(self, time_ms: int) -> None:
        self.processing.add(int(time_ms) * 1000)

    def delete_event_time(self, time_ms: int) -> None:
        self.event.discard(int(time_ms) * 1000)

    def delete_processing_time(self, time_ms: int) -> None:
        self.processing.discard(int(time_ms) * 1000)

    def all(self) -> list[Timer]:
        return sorted([Timer(t // 1000, "event") for t in self.event]
                      + [Timer(t // 1000, "processing") for t in self.processing])


class ValueState:
    def __init__(self, ctx: Context, name: str, ttl: int | None) -> None:
        self._ctx, self._name, self._ttl = ctx, name, ttl

    def get(self, default: Any = None) -> Any:
        held = self._ctx._entries.get(self._name)
        if held is None or held[1] is None or _gone(held[1][1], self._ctx._now_us):
            return default
        return held[1][0]

    def exists(self) -> bool:
        return self.get(_ABSENT) is not _ABSENT

    def update(self, value: Any) -> None:
        self._ctx._slot(self._name, "value", None)[1] = (value, self._ctx._expires(self._ttl))

    def clear(self) -> None:
        self._ctx._entries.pop(self._name, None)


class ListState:
    def __init__(self, ctx: Context, name: str, ttl: int | None) -> None:
        self._ctx, self._name, self._ttl = ctx, name, ttl

    def get(self) -> list[Any]:
        held = self._ctx._entries.get(self._name)
        return [] if held is None else [v for v, e in held[1] if not _gone(e, self._ctx._now_us)]

    def append(self, value: Any) -> None:
        self._ctx._slot(self._name, "list", [])[1].append((value, self._ctx._expires(self._ttl)))

    def extend(self, values: list[Any]) -> None:
        for v in values:
            self.append(v)

    def update(self, values: list[Any]) -> None:
        self.clear()
        self.extend(values)

    def clear(self) -> None:
        self._ctx._entries.pop(self._name, None)


class MapState:
    def __init__(self, ctx: Context, name: str, ttl: int | None) -> None:
        self._ctx, self._name, self._ttl = ctx, name, ttl

    def _data(self) -> dict[Any, Any]:
        held = self._ctx._entries.get(self._name)
        return {} if held is None else {k: v for k, (v, e) in held[1].items() if not _gone(e, self._ctx._now_us)}

    def get(self, key: Any, default: Any = None) -> Any:
        return self._data().get(key, default)

    def contains(self, key: Any) -> bool:
        return key in self._data()

    def put(self, key: Any, value: Any) -> None:
        self._ctx._slot(self._name, "map", {})[1][key] = (value, self._ctx._expires(self._ttl))

    def remove(self, key: Any) -> None:
        held = self._ctx._entries.get(self._name)
        if held is not None:
            held[1].pop(key, None)

    def items(self) -> list[tuple[Any, Any]]:
        return sorted(self._data().items(), key=lambda kv: repr(kv[0]))

    def keys(self) -> list[Any]:
        return [k for k, _ in self.items()]

    def clear(self) -> None:
        self._ctx._entries.pop(self._name, None)


_ABSENT = object()


def _gone(expires: int | None, now: int) -> bool:
    return expires is not None and expires <= now


def _expiries(kind: str, data: Any) -> list[int]:
    if kind == "value":
        return [data[1]] if data is not None and data[1] is not None else []
    entries = data if kind == "list" else data.values()
    return [e for _, e in entries if e is not None]


def _ttl(ttl: str | int | None) -> int | None:
    """A TTL in microseconds: a duration (``"10m"``) or milliseconds."""
    if ttl is None:
        return None
    return int(ttl) * 1000 if isinstance(ttl, int) else micros(ttl)


def _order(key: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple((v is None, repr(type(v)), v) for v in key)


def _groups(rows: pa.Table, keys: list[str]) -> dict[tuple[Any, ...], pa.Table]:
    """Each key's rows, in arrival order."""
    if not rows.num_rows:
        return {}
    numbered = rows.select(keys).append_column("__ftp_n", pa.array(np.arange(rows.num_rows), pa.int64()))
    grouped = numbered.group_by(keys, use_threads=False).aggregate([("__ftp_n", "list")])
    out = {}
    for row, ids in zip(grouped.select(keys).to_pylist(), grouped.column("__ftp_n_list").to_pylist()):
        out[tuple(row[k] for k in keys)] = rows.take(pa.array(sorted(ids), pa.int64()))
    return out
