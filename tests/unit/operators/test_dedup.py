"""The deduplication operator against a plain Python model, on both state backends: which rows pass,
which are late, that the choice among a step's repeats does not depend on their order, and that a
state rebuilt step by step goes on as the one that never stopped."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from ftpipeline.operators.base import StepContext
from ftpipeline.operators.dedup import Deduplicate
from ftpipeline.spec.model import DeduplicateOp
from ftpipeline.state.backend import make_backend

from .holder import Holder

S = 1_000_000
WITHIN = 10 * S


def steps_of(seed: int, count: int = 14) -> list[tuple[list[dict[str, Any]], int | None]]:
    rng = random.Random(seed)
    out: list[tuple[list[dict[str, Any]], int | None]] = []
    newest: int | None = None
    for step in range(count):
        rows = [{"k": rng.choice("abcd"), "ts": step * 4_000 + rng.randrange(-9_000, 4_000), "v": rng.randrange(5)}
                for _ in range(rng.randrange(0, 12))]
        out.append((rows, None if newest is None else (newest - 2_000) * 1000))
        if rows:
            newest = max([newest or -10**18, *(r["ts"] for r in rows)])
    return out


def model(steps: list[tuple[list[dict[str, Any]], int | None]]) -> tuple[list[list[tuple[Any, ...]]], list[list[int]]]:
    expires: dict[str, int] = {}
    passed_all, late_all = [], []
    for rows, mark in steps:
        if mark is not None:
            expires = {k: e for k, e in expires.items() if e > mark}
        late = sorted(r["ts"] for r in rows if mark is not None and r["ts"] * 1000 < mark)
        on_time = [r for r in rows if mark is None or r["ts"] * 1000 >= mark]
        passed = []
        for k in sorted({r["k"] for r in on_time}):
            first = min((r for r in on_time if r["k"] == k), key=lambda r: (r["ts"], r["v"]))
            if k not in expires:
                expires[k] = first["ts"] * 1000 + WITHIN
                passed.append((k, first["ts"], first["v"]))
        passed_all.append(passed)
        late_all.append(late)
    return passed_all, late_all


def table_of(rows: list[dict[str, Any]]) -> pa.Table:
    schema = pa.schema([("k", pa.string()), ("ts", pa.int64()), ("v", pa.int64())])
    return pa.Table.from_pylist(rows, schema=schema)


@pytest.mark.parametrize("backend_name", ["memory", "rocksdb"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_each_step_passes_what_the_model_says_whatever_the_rows_order(tmp_path: Path, backend_name: str,
                                                                      seed: int) -> None:
    steps = steps_of(seed)
    want, want_late = model(steps)
    for shuffled in (False, True):
        op = Deduplicate("d", DeduplicateOp(("k",), WITHIN, "ts"))
        holder = Holder(make_backend(backend_name, tmp_path / str(shuffled)), op.keys, op.index)
        for i, (rows, mark) in enumerate(steps, start=1):
            if shuffled:
                rows = random.Random(i).sample(rows, len(rows))
            out = op.process(holder, table_of(rows), StepContext(i, mark, where="d.0"))
            assert out.rows is not None
            assert [(r["k"], r["ts"], r["v"]) for r in out.rows.to_pylist()] == want[i - 1], (i, shuffled)
            late = sorted(out.late.column("ts").to_pylist()) if out.late is not None else []
            assert late == want_late[i - 1], i
    assert any(want_late) and sum(map(len, want)) < sum(len(r) for r, _ in steps)  # some late, some dropped


@pytest.mark.parametrize("backend_name", ["memory", "rocksdb"])
def test_a_state_rebuilt_step_by_step_goes_on_as_the_one_that_never_stopped(tmp_path: Path,
                                                                         backend_name: str) -> None:
    steps = steps_of(4)
    outputs = []
    for rebuild_until in (0, 7):
        op = Deduplicate("d", DeduplicateOp(("k",), WITHIN, "ts"))
        holder = Holder(make_backend(backend_name, tmp_path / str(rebuild_until)), op.keys, op.index)
        emitted = []
        for i, (rows, mark) in enumerate(steps, start=1):
            out = op.process(holder, table_of(rows), StepContext(i, mark, emit=i > rebuild_until))
            if i > 7:
                emitted.append(out.rows.to_pylist())
        outputs.append(emitted)
    assert outputs[0] == outputs[1] and any(outputs[0])
