"""The interval join against a plain Python model, on both state backends, for each join type: every pair of
on-time rows within the interval in the step the later one arrived, each unmatched row of an outer side once
the watermark passes its expiry, late rows apart; the state emptied by the end of input; a state rebuilt step
by step (and one checkpointed and restored) going on as the one that never stopped."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from ftpipeline.checkpoint.storage import CheckpointStorage
from ftpipeline.operators.base import StepContext
from ftpipeline.operators.join import IntervalJoin
from ftpipeline.spec.model import JoinOp
from ftpipeline.state.backend import make_backend

from .holder import Holder, output_of

MS = 1000
LOWER, UPPER = -3_000 * MS, 5_000 * MS
END = 2**63 - 1

Rows = list[dict[str, Any]]
Step = tuple[Rows, Rows, int | None]


def steps_of(seed: int, count: int = 16) -> list[Step]:
    rng = random.Random(seed)
    out: list[Step] = []
    newest: int | None = None
    for step in range(count):
        sides = []
        for side in ("l", "r"):
            sides.append([{"k": rng.choice("abc"), "ts": step * 2_000 + rng.randrange(-6_000, 2_000),
                           side: f"{side}{step}.{i}"} for i in range(rng.randrange(0, 6))])
        out.append((sides[0], sides[1], None if newest is None else (newest - 3_000) * MS))
        stamps = [r["ts"] for r in sides[0] + sides[1]]
        if stamps:
            newest = max([newest or -10**18, *stamps])
    out.append(([], [], END))
    return out


def model(steps: list[Step], kind: str) -> tuple[list[Counter[tuple[Any, ...]]], list[list[str]]]:
    """Per step: the output rows, and the late rows' ids."""
    on_time: list[tuple[int, str, dict[str, Any]]] = []
    late: list[list[str]] = []
    for i, (left, right, mark) in enumerate(steps):
        late.append(sorted([r["l"] for r in left if mark is not None and r["ts"] * MS < mark]
                           + [r["r"] for r in right if mark is not None and r["ts"] * MS < mark]))
        on_time += [(i, "l", r) for r in left if mark is None or r["ts"] * MS >= mark]
        on_time += [(i, "r", r) for r in right if mark is None or r["ts"] * MS >= mark]
    out: list[Counter[tuple[Any, ...]]] = [Counter() for _ in steps]
    matched: set[str] = set()
    for i, _, a in [x for x in on_time if x[1] == "l"]:
        for j, _, b in [x for x in on_time if x[1] == "r"]:
            if a["k"] == b["k"] and LOWER <= (b["ts"] - a["ts"]) * MS <= UPPER:
                out[max(i, j)][(a["k"], a["ts"], a["l"], b["ts"], b["r"])] += 1
                matched |= {a["l"], b["r"]}
    for i, side, row in on_time:
        if row[side] in matched or kind not in ("full", {"l": "left", "r": "right"}[side]):
            continue
        expiry = row["ts"] * MS + (UPPER if side == "l" else -LOWER)
        leaves = [s for s in range(i, len(steps)) if steps[s][2] is not None and steps[s][2] > expiry]  # type: ignore[operator]
        if leaves:
            key = (row["k"], row["ts"], row["l"], None, None) if side == "l" else (row["k"], None, None, row["ts"], row["r"])
            out[leaves[0]][key] += 1
    return out, late


def table_of(rows: Rows, side: str) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=pa.schema([("k", pa.string()), ("ts", pa.int64()), (side, pa.string())]))


def operator(kind: str) -> IntervalJoin:
    return IntervalJoin("j", JoinOp(kind, ("k",), "lefts", "rights", LOWER, UPPER, "ts", "ts"))


def run(op: IntervalJoin, holder: Holder, i: int, step: Step, emit: bool = True) -> Any:
    left, right, mark = step
    ctx = StepContext(i, mark, emit=emit, where="j.0",
                      inputs={"lefts": table_of(left, "l"), "rights": table_of(right, "r")})
    return op.process(holder, pa.table({}), ctx)


def rows_of(out: Any) -> Counter[tuple[Any, ...]]:
    return Counter((r["k"], r["left_ts"], r["l"], r["right_ts"], r["r"]) for r in output_of(out).to_pylist())


@pytest.mark.parametrize("backend_name", ["memory", "rocksdb"])
@pytest.mark.parametrize("kind", ["inner", "left", "right", "full"])
@pytest.mark.parametrize("seed", [1, 2])
def test_each_step_emits_what_the_model_says(tmp_path: Path, backend_name: str, kind: str, seed: int) -> None:
    steps = steps_of(seed)
    want, want_late = model(steps, kind)
    op = operator(kind)
    holder = Holder(make_backend(backend_name, tmp_path), op.keys, op.index)
    for i, step in enumerate(steps, start=1):
        out = run(op, holder, i, step)
        assert output_of(out).column_names == ["k", "left_ts", "l", "right_ts", "r"]
        assert rows_of(out) == want[i - 1], i
        late = out.late.to_pylist() if out.late is not None else []
        assert sorted(r.get("l") or r.get("r") for r in late) == want_late[i - 1], i
        assert all(r["late_input"] == ("lefts" if r.get("l") else "rights") for r in late)
    state = holder.get()
    assert state is None or sum(b.num_rows for b in state.scan()) == 0, "the end of input empties the state"
    assert sum(map(sum, (c.values() for c in want))) > 10 and any(want_late)


@pytest.mark.parametrize("backend_name", ["memory", "rocksdb"])
def test_a_state_rebuilt_or_restored_goes_on_as_the_one_that_never_stopped(tmp_path: Path, backend_name: str) -> None:
    steps = steps_of(3)
    outputs = []
    for how in ("straight", "rebuilt", "restored"):
        op = operator("full")
        backend = make_backend(backend_name, tmp_path / how)
        holder = Holder(backend, op.keys, op.index)
        emitted = []
        for i, step in enumerate(steps, start=1):
            if how == "restored" and i == 8:  # a checkpoint after step 7, reopened by a new operator
                state = holder.get()
                assert state is not None
                storage = CheckpointStorage(tmp_path / "ckpt" / how, "pipe")
                snap = state.freeze(storage, 1, "j.0", 7)()
                op = operator("full")
                holder = Holder(backend, op.keys, op.index)
                holder.state = backend.restore("j.0", storage, snap.path, op.keys, 7, op.index)
            out = run(op, holder, i, step, emit=not (how == "rebuilt" and i <= 7))
            if i > 7:
                emitted.append(rows_of(out))
        outputs.append(emitted)
    assert outputs[0] == outputs[1] == outputs[2] and any(outputs[0])


def test_keys_of_different_types_on_the_two_sides_are_refused_naming_the_field() -> None:
    op = operator("inner")
    left = pa.table({"k": pa.array([1], pa.int32()), "ts": [1]})
    right = pa.table({"k": pa.array([1], pa.int64()), "ts": [1]})
    with pytest.raises(ValueError, match=r"stage 'j' join.keys: 'k' is int32 in 'lefts' and int64 in 'rights'"):
        op.process(Holder(make_backend("memory", Path(".")), op.keys, op.index), pa.table({}),
                   StepContext(1, None, inputs={"lefts": left, "rights": right}))
