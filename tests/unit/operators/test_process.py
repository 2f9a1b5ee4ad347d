"""The keyed-function operator against the oracle's plain-Python run of the same class, on both state backends:
state, TTL and both kinds of timer give the same rows in the same steps; a state rebuilt step by step, or
checkpointed and restored, goes on as the one that never stopped; what the class gets wrong is named."""

from __future__ import annotations

import random
import sys
import types
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from ftpipeline.checkpoint.storage import CheckpointStorage
from ftpipeline.dataflow.murmur3 import channels
from ftpipeline.operators.base import StepContext
from ftpipeline.operators.process import ProcessOperator, UserFunctionError
from ftpipeline.oracle.files import STEP
from ftpipeline.oracle.process import processed
from ftpipeline.spec.model import ProcessOp, StageKind, StageSpec
from ftpipeline.state.backend import make_backend

from .holder import Holder, output_of

S = 1_000_000   # a second of the steps' clocks (us, as the runtime records them)
MS = 1_000      # a second of the function's API (ms)
OUTPUT = (("k", "string"), ("what", "string"), ("n", "long"), ("at", "long"))


class Counting:
    """Counts a key's rows (a value), remembers recent ones (a list with a TTL of 3 s of processing time), its
    tags (a map), fires an event-time timer 5 s of event time after each row and a processing-time one 2 s after
    the first; draws from ctx.rng."""

    def process(self, key: tuple[Any, ...], rows: pa.Table, ctx: Any) -> list[dict[str, Any]]:
        n = ctx.value("n")
        recent, tags = ctx.list("recent", ttl="3s"), ctx.map("tags")
        if not n.exists():
            ctx.timers.register_processing_time(ctx.now + 2 * MS)
        n.update(n.get(0) + rows.num_rows)
        for row in sorted(rows.to_pylist(), key=lambda r: (r["ts"], r["tag"])):
            recent.append(row["ts"])
            tags.put(row["tag"], tags.get(row["tag"], 0) + 1)
            ctx.timers.register_event_time(row["ts"] // 1000 + 5 * MS)  # the rows' ts here are us
        return [{"k": key[0], "what": "rows", "n": n.get(), "at": len(recent.get())}]

    def on_timer(self, key: tuple[Any, ...], timer: Any, ctx: Any) -> list[dict[str, Any]]:
        return [{"k": key[0], "what": timer.kind, "n": len(ctx.map("tags").keys()), "at": ctx.rng.randrange(1000)}]


MODULE = types.ModuleType("counting_module")
MODULE.Counting = Counting  # type: ignore[attr-defined]
sys.modules["counting_module"] = MODULE
STAGE = StageSpec("p", StageKind.PROCESS, 1, process=ProcessOp("Counting", ("k",), OUTPUT))


def steps_of(seed: int, count: int = 14) -> list[tuple[list[dict[str, Any]], int | None, int]]:
    rng = random.Random(seed)
    out: list[tuple[list[dict[str, Any]], int | None, int]] = []
    newest, now = None, 1_000 * S
    for step in range(count):
        rows = [{"k": rng.choice(["a", "b", "c", None]), "ts": step * S + rng.randrange(-2 * S, S),
                 "tag": rng.choice("xyz")} for _ in range(rng.randrange(0, 7))]
        now += rng.randrange(0, 2 * S)
        out.append((rows, None if newest is None else newest - S, now))
        newest = max([newest or 0, *(r["ts"] for r in rows)])
    out.append(([], 2**63 - 1, now + S))
    return out


def table_of(rows: list[dict[str, Any]]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=pa.schema([("k", pa.string()), ("ts", pa.int64()), ("tag", pa.string())]))


def expected(steps: list[tuple[list[dict[str, Any]], int | None, int]]) -> dict[int, Counter[tuple[Any, ...]]]:
    rows = pa.concat_tables([table_of(r).append_column(STEP, pa.array([i] * len(r), pa.int32()))
                             for i, (r, _, _) in enumerate(steps, start=1)])
    marks = {i: m for i, (_, m, _) in enumerate(steps, start=1)}
    times = {i: t for i, (_, _, t) in enumerate(steps, start=1)}
    out: dict[int, Counter[tuple[Any, ...]]] = {}
    for row in processed(MODULE, rows, STAGE, marks, times, len(steps), []).to_pylist():
        out.setdefault(row[STEP], Counter())[(row["k"], row["what"], row["n"], row["at"])] += 1
    return out


def got(out: Any) -> Counter[tuple[Any, ...]]:
    return Counter((r["k"], r["what"], r["n"], r["at"]) for r in output_of(out).to_pylist())


@pytest.mark.parametrize("backend_name", ["memory", "rocksdb"])
@pytest.mark.parametrize("seed", [1, 2])
def test_each_step_emits_what_the_class_run_alone_emits(tmp_path: Path, backend_name: str, seed: int) -> None:
    steps = steps_of(seed)
    want = expected(steps)
    op = ProcessOperator("p", STAGE.process, MODULE)  # type: ignore[arg-type]
    holder = Holder(make_backend(backend_name, tmp_path), op.keys, op.index)
    dead = 0
    for i, (rows, mark, now) in enumerate(steps, start=1):
        out = op.process(holder, table_of(rows), StepContext(i, mark, where="p.0", now=now))
        assert got(out) == want.get(i, Counter()), i
        dead += len(out.dead)
    kinds = {k[1] for c in want.values() for k in c}
    assert kinds == {"rows", "event", "processing"} and dead > 0
    state = holder.get()
    assert state is not None


@pytest.mark.parametrize("backend_name", ["memory", "rocksdb"])
def test_a_state_rebuilt_or_restored_goes_on_as_the_one_that_never_stopped(tmp_path: Path, backend_name: str) -> None:
    steps = steps_of(3)
    outputs = []
    for how in ("straight", "rebuilt", "restored"):
        op = ProcessOperator("p", STAGE.process, MODULE)  # type: ignore[arg-type]
        backend = make_backend(backend_name, tmp_path / how)
        holder = Holder(backend, op.keys, op.index)
        emitted = []
        for i, (rows, mark, now) in enumerate(steps, start=1):
            if how == "restored" and i == 7:
                state = holder.get()
                assert state is not None
                storage = CheckpointStorage(tmp_path / "ckpt" / how, "pipe")
                snap = state.freeze(storage, 1, "p.0", 6)()
                op = ProcessOperator("p", STAGE.process, MODULE)  # type: ignore[arg-type]
                holder = Holder(backend, op.keys, op.index)
                holder.state = backend.restore("p.0", storage, snap.path, op.keys, 6, op.index)
            out = op.process(holder, table_of(rows), StepContext(i, mark, emit=not (how == "rebuilt" and i <= 6), now=now))
            if i > 6:
                emitted.append(got(out))
        outputs.append(emitted)
    assert outputs[0] == outputs[1] == outputs[2] and any(outputs[0])


class Broken:
    def process(self, key: tuple[Any, ...], rows: pa.Table, ctx: Any) -> Any:
        if key[0] == "boom":
            raise KeyError("no such thing")
        if key[0] == "timer":
            ctx.timers.register_event_time(0)
        return [{"k": key[0]}]  # no "what": process.output names it


@pytest.mark.parametrize(("key", "words"), [
    ("boom", "stage 'p': Counting raised KeyError for key ('boom',): 'no such thing'"),
    ("ok", "stage 'p': Counting returned no column what, n, at (process.output names it)"),
])
def test_what_the_class_gets_wrong_is_named(key: str, words: str) -> None:
    module = types.ModuleType("broken")
    module.Counting = Broken  # type: ignore[attr-defined]
    op = ProcessOperator("p", STAGE.process, module)  # type: ignore[arg-type]
    holder = Holder(make_backend("memory", Path(".")), op.keys, op.index)
    with pytest.raises(UserFunctionError) as info:
        op.process(holder, table_of([{"k": key, "ts": 1, "tag": "x"}]), StepContext(1, None, now=1))
    assert str(info.value) == words


class Seeded(Counting):
    """Counting, its count starting from the initial state's ``n0`` and an event-time timer at its ``t0``."""

    def init_state(self, key: tuple[Any, ...], rows: pa.Table, ctx: Any) -> None:
        ctx.value("n").update(sum(rows.column("n0").to_pylist()))
        ctx.timers.register_event_time(min(rows.column("t0").to_pylist()))


def test_an_initial_state_seeds_each_channels_keys_before_the_first_step(tmp_path: Path) -> None:
    """Two channels, each handed the rows its keys hash to (as the input edge hashes them): together they emit
    what the class run alone emits from the whole initial table, including keys the stream never has."""
    (tmp_path / "init").mkdir()
    pq.write_table(pa.table({"k": ["a", "b", "quiet", "a"], "n0": [10, 20, 30, 5],
                             "t0": [3 * MS, 1 * MS, 2 * MS, 9 * MS]}),  # timers: ms
                   tmp_path / "init" / "part-0.parquet")
    module = types.ModuleType("seeded")
    module.Counting = Seeded  # type: ignore[attr-defined]
    spec = ProcessOp("Counting", ("k",), OUTPUT, initial_parquet=tmp_path / "init")
    stage = StageSpec("p", StageKind.PROCESS, 2, process=spec)
    steps = steps_of(4, 8)
    rows = pa.concat_tables([table_of(r).append_column(STEP, pa.array([i] * len(r), pa.int32()))
                             for i, (r, _, _) in enumerate(steps, start=1)])
    want: dict[int, Counter[tuple[Any, ...]]] = {}
    for row in processed(module, rows, stage, {i: m for i, (_, m, _) in enumerate(steps, start=1)},
                         {i: t for i, (_, _, t) in enumerate(steps, start=1)}, len(steps), []).to_pylist():
        want.setdefault(row[STEP], Counter())[(row["k"], row["what"], row["n"], row["at"])] += 1
    ops = [ProcessOperator("p", spec, module, 2) for _ in range(2)]
    holders = [Holder(make_backend("memory", tmp_path / f"s{c}"), ops[c].keys, ops[c].index) for c in range(2)]
    for i, (step_rows, mark, now) in enumerate(steps, start=1):
        table = table_of(step_rows)
        owner = channels(table, ["k"], 2)
        assert owner is not None
        seen: Counter[tuple[Any, ...]] = Counter()
        for c in range(2):
            mine = table.filter(pc.equal(owner, c)) if table.num_rows else table
            seen += got(ops[c].process(holders[c], mine, StepContext(i, mark, where=f"p.{c}", now=now)))
        assert seen == want.get(i, Counter()), i
    quiet = [r for c in want.values() for r in c if r[0] == "quiet"]
    assert [r[1] for r in quiet] == ["event"]  # a key the stream never has: its initial timer fired
    assert min(r[2] for c in want.values() for r in c if r[:2] == ("a", "rows")) > 15  # counted on from 10 + 5


@pytest.mark.parametrize(("table", "returns", "words"), [
    (pa.table({"key": ["a"], "n0": [1], "t0": [1]}), False, "the table has no column k (process.keys)"),
    (pa.table({"k": ["a", None], "n0": [1, 2], "t0": [1, 2]}), False, "1 rows with a null key"),
    (pa.table({"k": ["a"], "n0": [1], "t0": [1]}), True, "Counting.init_state returned rows"),
])
def test_an_initial_state_the_class_or_table_gets_wrong_is_named(tmp_path: Path, table: pa.Table, returns: bool,
                                                                words: str) -> None:
    class Returning(Seeded):
        def init_state(self, key: tuple[Any, ...], rows: pa.Table, ctx: Any) -> Any:
            super().init_state(key, rows, ctx)
            return [{"k": key[0], "what": "init", "n": 0, "at": 0}] if returns else None

    (tmp_path / "init").mkdir()
    pq.write_table(table, tmp_path / "init" / "part-0.parquet")
    module = types.ModuleType("returning")
    module.Counting = Returning  # type: ignore[attr-defined]
    op = ProcessOperator("p", ProcessOp("Counting", ("k",), OUTPUT, initial_parquet=tmp_path / "init"), module)
    holder = Holder(make_backend("memory", tmp_path), op.keys, op.index)
    with pytest.raises(UserFunctionError) as info:
        op.process(holder, table_of([{"k": "b", "ts": 1, "tag": "x"}]), StepContext(1, None, where="p.0", now=1))
    assert words in str(info.value)


def test_the_api_speaks_milliseconds_and_a_timer_far_behind_the_watermark_is_said_once(tmp_path: Path) -> None:
    """ctx.watermark, ctx.now and every timer are milliseconds since the epoch (the steps record us); a timer set
    more than a day behind the watermark (microseconds by mistake, or seconds) fires at once, and is said once."""
    seen: list[tuple[Any, ...]] = []

    class Clocked:
        def process(self, key: tuple[Any, ...], rows: pa.Table, ctx: Any) -> None:
            seen.append((ctx.watermark, ctx.now))
            ctx.timers.register_event_time(ctx.watermark + 5 * MS)
            ctx.timers.register_event_time(ctx.watermark // 1000)  # seconds by mistake: far behind

        def on_timer(self, key: tuple[Any, ...], timer: Any, ctx: Any) -> list[dict[str, Any]]:
            return [{"k": key[0], "what": "event", "n": 0, "at": timer.time}]

    module = types.ModuleType("clocked")
    module.Counting = Clocked  # type: ignore[attr-defined]
    op = ProcessOperator("p", STAGE.process, module)  # type: ignore[arg-type]
    holder = Holder(make_backend("memory", tmp_path), op.keys, op.index)
    day = 86_400 * S
    for i in (1, 2):
        op.process(holder, table_of([{"k": "a", "ts": 1, "tag": "x"}]), StepContext(i, 1_700_000_000 * S + i * day,
                                                                                    now=1_800_000_000 * S))
    assert seen[0] == (1_700_000_000_000 + 86_400_000, 1_800_000_000_000)
    fired = op.process(holder, table_of([]), StepContext(3, 1_700_000_000 * S + 4 * day, now=1_800_000_000 * S))
    # step 2's two timers, in ms: the one seconds by mistake, and its watermark plus 5 s
    assert sorted(r["at"] for r in output_of(fired).to_pylist()) == [1_700_000_000 + 2 * 86_400,
                                                                     1_700_000_000_000 + 2 * 86_400_000 + 5_000]
    [warning] = op.warnings
    assert warning.startswith("stage 'p': Counting: an event-time timer was set at 1700086400 ms") and "days" in warning
