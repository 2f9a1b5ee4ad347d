"""The oracle of a keyed function (``operators/process.py``): the user's class run over each key's rows in step
order, with the run's recorded watermarks and processing times, its state in plain dicts.

For each key and each step 1..N, as the runtime's contract says: entries
whose TTL ran out by the step's processing time are gone; the key's
event-time timers at or before the step's watermark fire in time order, then
its processing-time timers at or before the step's processing time; then
``process`` gets the key's rows of the step (those that came before the
step's advance first, in a call of their own with the watermark before it,
and what that call and the timers return is early downstream:
``eventtime/order.py``); before step 1, ``init_state``
gets the key's rows of ``process.initialState`` (read by delta-rs or
pyarrow, not the runtime's reader). The rows a call returns are
expected in that step. ``ctx.rng`` is seeded as the contract says (the
stage, the step and the key).

None of the runtime's state backend, encoding, index or expiry is used: the
state is a dict per key that never leaves this process.
"""

from __future__ import annotations

import hashlib
import io
import random
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ftpipeline.eventtime.columns import END_OF_INPUT
from ftpipeline.objectstore.base import is_remote, open_store
from ftpipeline.objectstore.config import storage_options
from ftpipeline.operators.process import TYPES  # the spec's type names: the contract, not the runtime's work
from ftpipeline.oracle.files import STEP, Letter
from ftpipeline.oracle.windows import EARLY, befores
from ftpipeline.spec.durations import micros
from ftpipeline.spec.model import StageSpec


@dataclass(frozen=True, order=True)
class _Timer:
    time: int
    kind: str


class _Timers:
    """Times in milliseconds, as the contract says; kept so too (the step's times are compared in them)."""

    def __init__(self) -> None:
        self.event: set[int] = set()
        self.processing: set[int] = set()

    def register_event_time(self, t: int) -> None:
        self.event.add(int(t))

    def register_processing_time(self, t: int) -> None:
        self.processing.add(int(t))

    def delete_event_time(self, t: int) -> None:
        self.event.discard(int(t))

    def delete_processing_time(self, t: int) -> None:
        self.processing.discard(int(t))

    def all(self) -> list[_Timer]:
        return sorted([_Timer(t, "event") for t in self.event] + [_Timer(t, "processing") for t in self.processing])


class _Handle:
    """One named state of one key: entries with an expiry each (None: never)."""

    def __init__(self, ctx: _Context, name: str, kind: str, ttl: str | int | None) -> None:
        self.ctx, self.name, self.kind = ctx, name, kind  # a TTL in us: a duration, or milliseconds
        self.ttl = micros(ttl) if isinstance(ttl, str) else (ttl * 1000 if ttl else None)

    def _live(self) -> Any:
        store = self.ctx.store.get(self.name)
        now = self.ctx.now_us
        if store is None:
            return {} if self.kind == "map" else ([] if self.kind == "list" else None)
        if self.kind == "value":
            return store if store[1] is None or store[1] > now else None
        if self.kind == "list":
            return [e for e in store if e[1] is None or e[1] > now]
        return {k: e for k, e in store.items() if e[1] is None or e[1] > now}

    def _exp(self) -> int | None:
        return self.ctx.now_us + self.ttl if self.ttl else None

    # value
    def get(self, *args: Any) -> Any:
        live = self._live()
        if self.kind == "value":
            return live[0] if live is not None else (args[0] if args else None)
        if self.kind == "list":
            return [v for v, _ in live]
        return live[args[0]][0] if args[0] in live else (args[1] if len(args) > 1 else None)

    def exists(self) -> bool:
        return self._live() is not None

    def update(self, value: Any) -> None:
        if self.kind == "value":
            self.ctx.store[self.name] = (value, self._exp())
        else:
            self.ctx.store[self.name] = [(v, self._exp()) for v in value]

    def clear(self) -> None:
        self.ctx.store.pop(self.name, None)

    # list
    def append(self, value: Any) -> None:
        self.ctx.store[self.name] = [*self._live(), (value, self._exp())]

    def extend(self, values: list[Any]) -> None:
        for v in values:
            self.append(v)

    # map
    def contains(self, key: Any) -> bool:
        return key in self._live()

    def put(self, key: Any, value: Any) -> None:
        self.ctx.store[self.name] = {**self._live(), key: (value, self._exp())}

    def remove(self, key: Any) -> None:
        self.ctx.store[self.name] = {k: e for k, e in self._live().items() if k != key}

    def items(self) -> list[tuple[Any, Any]]:
        return sorted(((k, v) for k, (v, _) in self._live().items()), key=lambda kv: repr(kv[0]))

    def keys(self) -> list[Any]:
        return [k for k, _ in self.items()]


class _Context:
    def __init__(self, stage: str, key: tuple[Any, ...], store: dict[str, Any], timers: _Timers) -> None:
        self.stage, self.key, self.store, self.timers = stage, key, store, timers
        self.step, self.now, self.now_us = 0, 0, 0
        self.watermark: int | None = None
        self.rng = random.Random(0)

    def at(self, step: int, watermark_us: int | None, now_us: int) -> None:
        """The step's times, recorded in us, as the function sees them: milliseconds (the end of input's
        watermark stays 2**63 - 1)."""
        self.step, self.now_us, self.now = step, now_us, now_us // 1000
        self.watermark = watermark_us if watermark_us is None or watermark_us == END_OF_INPUT else watermark_us // 1000
        seed = hashlib.blake2b(repr((self.stage, step, self.key)).encode(), digest_size=8).digest()
        self.rng = random.Random(int.from_bytes(seed, "big"))

    def value(self, name: str, ttl: str | int | None = None) -> _Handle:
        return _Handle(self, name, "value", ttl)

    def list(self, name: str, ttl: str | int | None = None) -> _Handle:
        return _Handle(self, name, "list", ttl)

    def map(self, name: str, ttl: str | int | None = None) -> _Handle:
        return _Handle(self, name, "map", ttl)

    def due(self) -> Iterator[_Timer]:
        while True:
            events = sorted(t for t in self.timers.event if self.watermark is not None and t <= self.watermark)
            if events:
                self.timers.event.discard(events[0])
                yield _Timer(events[0], "event")
                continue
            times = sorted(t for t in self.timers.processing if t <= self.now)
            if not times:
                return
            self.timers.processing.discard(times[0])
            yield _Timer(times[0], "processing")


def processed(module: Any, rows: pa.Table, stage: StageSpec, marks: Mapping[int, int | None], times: dict[int, int | None],
              steps: int, letters: list[Letter]) -> pa.Table:
    """The stage's expected output of steps 1..``steps``, with a ``STEP`` column; ``rows``: its input, with one."""
    import json

    op = stage.process
    assert op is not None
    keys = list(op.keys)
    before = befores(marks)
    instance = getattr(module, op.class_name)()
    by_key: dict[tuple[Any, ...], dict[int, list[dict[str, Any]]]] = {}
    for row in rows.to_pylist():
        if any(row.get(k) is None for k in keys):
            letters.append(Letter(stage.name, int(row[STEP]), stage.name, json.dumps(
                {c: v for c, v in row.items() if c not in (STEP, EARLY)}, default=str)))
            continue
        by_key.setdefault(tuple(row[k] for k in keys), {}).setdefault(int(row[STEP]), []).append(row)
    initial = _initial(stage, rows.schema, times.get(1) or 0) if steps else {}
    schema = pa.schema([(name, TYPES[kind]) for name, kind in op.output])
    out: list[pa.Table] = []
    for key in sorted(set(by_key) | set(initial), key=repr):
        store: dict[str, Any] = {}
        ctx = _Context(stage.name, key, store, _Timers())
        mine = by_key.get(key, {})
        for step in range(1, steps + 1):
            now = times.get(step) or 0
            early = [r for r in mine.get(step, []) if r.get(EARLY)]
            after = [r for r in mine.get(step, []) if not r.get(EARLY)]
            results: list[tuple[Any, bool]] = []
            if step == 1 and key in initial:
                ctx.at(step, before.get(step, marks.get(step)) if early else marks.get(step), now)
                instance.init_state(key, initial[key].to_pandas() if op.rows == "pandas" else initial[key], ctx)
            if early:  # rows that came before the step's advance: a call of their own, no timer fires
                ctx.at(step, before.get(step, marks.get(step)), now)
                results.append((instance.process(key, _handed(early, op.rows), ctx), True))
            ctx.at(step, marks.get(step), now)
            results += [(instance.on_timer(key, timer, ctx), True) for timer in ctx.due()]
            if after:
                results.append((instance.process(key, _handed(after, op.rows), ctx), False))
            for result, kind in results:
                table = _table(result)
                if table is not None and table.num_rows:
                    table = table.select(schema.names).cast(schema)
                    out.append(table.append_column(STEP, pa.array([step] * table.num_rows, pa.int32()))
                               .append_column(EARLY, pa.array([kind] * table.num_rows, pa.bool_())))
    return pa.concat_tables(out) if out else schema.append(pa.field(STEP, pa.int32())).append(
        pa.field(EARLY, pa.bool_())).empty_table()


def _handed(rows: list[dict[str, Any]], kind: str) -> Any:
    """A key's rows of a call, as the user's function takes them (without the oracle's columns)."""
    part = pa.Table.from_pylist([{c: v for c, v in r.items() if c not in (STEP, EARLY)} for r in rows])
    return part.to_pandas() if kind == "pandas" else part


def _initial(stage: StageSpec, schema: pa.Schema, at_us: int) -> dict[tuple[Any, ...], pa.Table]:
    """``process.initialState``'s rows by key: a Delta table as of the first step's time (delta-rs's time
    travel), or a Parquet directory whole; key columns cast to the input's types."""
    op = stage.process
    assert op is not None
    if op.initial_delta is not None:
        from deltalake import DeltaTable

        table = DeltaTable(str(op.initial_delta), storage_options=(storage_options(None) or None)
                           if is_remote(str(op.initial_delta)) else None)
        table.load_as_version(datetime.fromtimestamp(at_us / 1e6, timezone.utc))
        rows = table.to_pyarrow_table()
    elif op.initial_parquet is not None:
        rows = _parquet_dir(op.initial_parquet)
    else:
        return {}
    keys = list(op.keys)
    by_key: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for row in rows.to_pylist():
        key = tuple(pa.scalar(row[k]).cast(schema.field(k).type).as_py() for k in keys)
        by_key.setdefault(key, []).append(row)
    return {k: pa.Table.from_pylist(v, schema=rows.schema) for k, v in by_key.items()}


def _parquet_dir(path: Any) -> pa.Table:
    store = open_store(path)
    names = sorted(k for k in store.list() if k.endswith(".parquet") and not k.split("/")[-1].startswith(("_", ".")))
    parts = [pq.read_table(store.local_path(k) or io.BytesIO(store.get(k))) for k in names]
    return pa.concat_tables(parts, promote_options="permissive") if parts else pa.table({})


def _table(result: Any) -> pa.Table | None:
    if result is None:
        return None
    if isinstance(result, pa.Table):
        return result
    if isinstance(result, list):
        return pa.Table.from_pylist(result) if result else None
    return pa.Table.from_pandas(result, preserve_index=False)
