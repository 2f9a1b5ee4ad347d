"""The Arrow side of the running aggregation: merging partials into state (on every state
backend), and null-key rows."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ftpipeline.dataflow import aggregate
from ftpipeline.dataflow.aggregate import ROWS, partial_arrow, split_null_keys
from ftpipeline.spec.model import AggregateOp, Aggregation
from ftpipeline.state.backend import STEP, KeyedState, StateBackend, make_backend

OP = AggregateOp(
    ("user",),
    (
        Aggregation("n", "count"),
        Aggregation("total", "sum", "amount"),
        Aggregation("lo", "min", "ts"),
        Aggregation("hi", "max", "ts"),
    ),
)
SCHEMA = pa.schema([
    ("user", pa.string()),
    (ROWS, pa.int64()),
    ("n", pa.int64()),
    ("total", pa.int64()),
    ("lo", pa.int64()),
    ("hi", pa.int64()),
])
COLS = ["n", "total", "lo", "hi"]


def partial(*rows: tuple[Any, ...], schema: pa.Schema = SCHEMA) -> pa.Table:
    """Rows as (user, rows, n, total, lo, hi) — what Spark's groupBy of one step would return."""
    return pa.Table.from_pylist([dict(zip(schema.names, r)) for r in rows], schema=schema)


BACKEND: list[StateBackend] = []


@pytest.fixture(autouse=True, params=["memory", "rocksdb"])
def backend(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    BACKEND.append(make_backend(request.param, tmp_path_factory.mktemp("state")))
    yield
    BACKEND.clear()


def merge(state: KeyedState | None, part: pa.Table, op: AggregateOp) -> tuple[KeyedState, pa.Table]:
    """Fold a partial into ``state`` (a new one on this test's backend if None), as step state.step + 1."""
    if state is None:
        state = BACKEND[0].create("agg.0", aggregate.state_schema(part, op), list(op.key_by))
    return state, aggregate.merge(state, part, op, step=1)


def table(state: KeyedState) -> pa.Table:
    return pa.Table.from_batches(list(state.scan()), schema=state.schema).drop_columns([STEP])


def by_key(held: pa.Table | KeyedState, keys: tuple[str, ...] = ("user",)) -> dict[Any, dict[str, Any]]:
    out: dict[Any, dict[str, Any]] = {}
    rows = held if isinstance(held, pa.Table) else table(held)
    for row in rows.to_pylist():
        key = tuple(row.pop(k) for k in keys)
        assert key not in out, f"duplicate key {key}"
        out[key if len(keys) > 1 else key[0]] = row
    return out


def test_first_partial_becomes_the_state() -> None:
    part = partial(("a", 2, 2, 10, 1, 5), ("b", 1, 1, 3, 7, 7))
    state, updated = merge(None, part, OP)
    assert table(state).column_names == ["user", *COLS]  # the hidden row count is not kept
    assert by_key(state) == {"a": {"n": 2, "total": 10, "lo": 1, "hi": 5}, "b": {"n": 1, "total": 3, "lo": 7, "hi": 7}}
    assert by_key(updated) == by_key(state)


def test_state_schema_has_keys_aggregates_and_the_step() -> None:
    assert aggregate.state_schema(partial(), OP) == pa.schema(
        [SCHEMA.field(n) for n in ["user", *COLS]] + [pa.field(STEP, pa.int64())])


def test_empty_partial_keeps_the_state_and_touches_nothing() -> None:
    state, _ = merge(None, partial(("a", 2, 2, 10, 1, 5)), OP)
    new_state, updated = merge(state, partial(), OP)
    assert by_key(new_state) == by_key(state)
    assert updated.num_rows == 0


def test_new_keys_are_appended() -> None:
    state, _ = merge(None, partial(("a", 1, 1, 1, 1, 1), ("b", 1, 1, 2, 2, 2)), OP)
    new_state, updated = merge(state, partial(("c", 1, 1, 3, 3, 3)), OP)
    assert by_key(new_state) == {
        "a": {"n": 1, "total": 1, "lo": 1, "hi": 1},
        "b": {"n": 1, "total": 2, "lo": 2, "hi": 2},
        "c": {"n": 1, "total": 3, "lo": 3, "hi": 3},
    }
    assert by_key(updated) == {"c": {"n": 1, "total": 3, "lo": 3, "hi": 3}}


def test_existing_keys_are_merged_per_op() -> None:
    state, _ = merge(None, partial(("a", 2, 2, 10, 5, 8), ("b", 1, 1, 4, 4, 4)), OP)
    new_state, updated = merge(state, partial(("a", 3, 3, 7, 2, 6), ("b", 1, 1, 1, 9, 9)), OP)
    expected = {
        "a": {"n": 5, "total": 17, "lo": 2, "hi": 8},
        "b": {"n": 2, "total": 5, "lo": 4, "hi": 9},
    }
    assert by_key(new_state) == expected
    assert by_key(updated) == expected


def test_updated_has_exactly_the_touched_keys() -> None:
    state, _ = merge(None, partial(*[(k, 1, 1, 1, 1, 1) for k in "abcde"]), OP)
    new_state, updated = merge(state, partial(("b", 1, 1, 1, 1, 1), ("e", 1, 1, 1, 1, 1), ("z", 1, 1, 1, 1, 1)), OP)
    assert set(by_key(updated)) == {"b", "e", "z"}
    assert by_key(updated)["b"] == {"n": 2, "total": 2, "lo": 1, "hi": 1}
    assert by_key(updated)["z"] == {"n": 1, "total": 1, "lo": 1, "hi": 1}
    assert set(by_key(new_state)) == set("abcdez")  # by_key also checks one row per key
    assert table(new_state).num_rows == 6
    assert by_key(new_state)["a"] == {"n": 1, "total": 1, "lo": 1, "hi": 1}  # untouched keys unchanged


def test_state_keeps_the_partial_schema() -> None:
    state, _ = merge(None, partial(("a", 1, 1, 1, 1, 1)), OP)
    new_state, updated = merge(state, partial(("a", 1, 1, 1, 1, 1), ("b", 1, 1, 1, 1, 1)), OP)
    assert table(new_state).schema == table(state).schema
    assert updated.schema == table(state).schema


def test_null_partial_values_keep_the_state() -> None:
    """A step whose values are all null (Spark's sum/min/max give null) leaves the totals as they were."""
    state, _ = merge(None, partial(("a", 2, 2, 10, 3, 9)), OP)
    new_state, updated = merge(state, partial(("a", 1, 1, None, None, None)), OP)
    assert by_key(new_state)["a"] == {"n": 3, "total": 10, "lo": 3, "hi": 9}
    assert by_key(updated)["a"] == {"n": 3, "total": 10, "lo": 3, "hi": 9}


def test_null_state_values_take_the_partial() -> None:
    state, _ = merge(None, partial(("a", 1, 1, None, None, None)), OP)
    assert by_key(state)["a"] == {"n": 1, "total": None, "lo": None, "hi": None}
    new_state, _ = merge(state, partial(("a", 1, 1, 4, 6, 6)), OP)
    assert by_key(new_state)["a"] == {"n": 2, "total": 4, "lo": 6, "hi": 6}


def test_null_on_both_sides_stays_null() -> None:
    state, _ = merge(None, partial(("a", 1, 1, None, None, None)), OP)
    new_state, _ = merge(state, partial(("a", 2, 2, None, None, None)), OP)
    assert by_key(new_state)["a"] == {"n": 3, "total": None, "lo": None, "hi": None}


def test_multi_column_keys() -> None:
    op = AggregateOp(("user", "day"), (Aggregation("n", "count"), Aggregation("total", "sum", "amount")))
    schema = pa.schema([("user", pa.string()), ("day", pa.int32()), (ROWS, pa.int64()), ("n", pa.int64()), ("total", pa.float64())])
    state, _ = merge(None, partial(("a", 1, 1, 1, 1.5), ("a", 2, 1, 1, 2.0), ("b", 1, 1, 1, 4.0), schema=schema), op)
    new_state, updated = merge(state, partial(("a", 2, 2, 2, 0.5), ("b", 2, 1, 1, 1.0), schema=schema), op)
    keys = ("user", "day")
    assert by_key(updated, keys) == {("a", 2): {"n": 3, "total": 2.5}, ("b", 2): {"n": 1, "total": 1.0}}
    assert by_key(new_state, keys) == {
        ("a", 1): {"n": 1, "total": 1.5},
        ("a", 2): {"n": 3, "total": 2.5},
        ("b", 1): {"n": 1, "total": 4.0},
        ("b", 2): {"n": 1, "total": 1.0},
    }
    assert table(new_state).schema.field("day").type == pa.int32()


# -- null keys ------------------------------------------------------------------------


def test_split_null_keys_counts_the_hidden_rows() -> None:
    part = partial(("a", 3, 3, 1, 1, 1), (None, 7, 7, 2, 2, 2), ("b", 2, 2, 1, 1, 1))
    kept, dropped = split_null_keys(part, OP)
    assert dropped == 7  # rows of the batch, not rows of the partial
    assert kept.column("user").to_pylist() == ["a", "b"]
    assert kept.column_names == part.column_names


def test_split_null_keys_without_nulls() -> None:
    part = partial(("a", 3, 3, 1, 1, 1))
    kept, dropped = split_null_keys(part, OP)
    assert dropped == 0
    assert kept.equals(part)


def test_split_null_keys_of_an_empty_partial() -> None:
    kept, dropped = split_null_keys(partial(), OP)
    assert dropped == 0 and kept.num_rows == 0


def test_split_null_keys_any_key_column() -> None:
    op = AggregateOp(("user", "day"), (Aggregation("n", "count"),))
    schema = pa.schema([("user", pa.string()), ("day", pa.int32()), (ROWS, pa.int64()), ("n", pa.int64())])
    part = partial(("a", 1, 2, 2), ("a", None, 5, 5), (None, 1, 4, 4), (None, None, 1, 1), schema=schema)
    kept, dropped = split_null_keys(part, op)
    assert dropped == 10
    assert kept.to_pylist() == [{"user": "a", "day": 1, ROWS: 2, "n": 2}]


# -- merging step by step equals aggregating everything at once -------------------------

values = st.one_of(st.none(), st.integers(-1000, 1000))
steps = st.lists(st.lists(st.tuples(st.sampled_from("abcde"), values), max_size=12), min_size=1, max_size=6)


def aggregate_rows(rows: list[tuple[str, int | None]]) -> dict[str, dict[str, Any]]:
    """count/sum/min/max per key in plain Python, with SQL's null rules (null if no non-null value)."""
    out: dict[str, dict[str, Any]] = {}
    for key in sorted({k for k, _ in rows}):
        vs = [v for k, v in rows if k == key]
        present = [v for v in vs if v is not None]
        out[key] = {
            "n": len(vs),
            "total": sum(present) if present else None,
            "lo": min(present) if present else None,
            "hi": max(present) if present else None,
        }
    return out


def as_partial(rows: list[tuple[str, int | None]]) -> pa.Table:
    agg = aggregate_rows(rows)
    return partial(*[(k, a["n"], a["n"], a["total"], a["lo"], a["hi"]) for k, a in agg.items()])


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)  # the fixture picks the backend
@given(steps)
def test_merging_partials_equals_aggregating_all_rows(batches: list[list[tuple[str, int | None]]]) -> None:
    state = None
    seen: list[tuple[str, int | None]] = []
    for batch in batches:
        state, updated = merge(state, as_partial(batch), OP)
        seen += batch
        totals = aggregate_rows(seen)
        assert by_key(updated) == {k: totals[k] for k in {k for k, _ in batch}}
    assert state is not None
    assert by_key(state) == aggregate_rows(seen)


@pytest.mark.parametrize("column, kind", [
    ("price", pa.decimal128(10, 2)),   # Spark widens a decimal sum's precision
    ("price", pa.timestamp("us")),     # Spark attaches the session time zone
])
def test_a_type_with_sparks_own_rules_is_left_to_spark(column: str, kind: pa.DataType) -> None:
    table = pa.table({"user": ["a"], "day": [1], "price": pa.array([None], kind)})
    op = AggregateOp(("user",), (Aggregation("x", "sum" if pa.types.is_decimal(kind) else "min", column),))
    assert partial_arrow(table, op) is None


def test_floating_min_and_max_are_left_to_spark() -> None:
    op = AggregateOp(("user",), (Aggregation("lo", "min", "price"),))
    assert partial_arrow(pa.table({"user": ["a"], "price": [float("nan")]}), op) is None


def test_arrows_partial_counts_sums_and_orders() -> None:
    table = pa.table({"user": ["a", "b", "a", None], "amount": pa.array([1, 2, 3, 4], pa.int32()),
                      "ts": [5, 6, 7, 8]})
    part = partial_arrow(table, OP)
    assert part is not None
    assert part.schema == SCHEMA
    assert sorted(part.to_pylist(), key=str) == sorted([
        {"user": "a", ROWS: 2, "n": 2, "total": 4, "lo": 5, "hi": 7},
        {"user": "b", ROWS: 1, "n": 1, "total": 2, "lo": 6, "hi": 6},
        {"user": None, ROWS: 1, "n": 1, "total": 4, "lo": 8, "hi": 8},
    ], key=str)


def test_a_missing_column_is_left_to_spark_whose_error_names_it() -> None:
    op = AggregateOp(("user",), (Aggregation("t", "sum", "amount"),))
    assert partial_arrow(pa.table({"user": ["a"]}), op) is None
    assert partial_arrow(pa.table({"amount": [1]}), op) is None


# -- TTL: a key idle for more than ttl steps starts anew -----------------------------------

ttl_steps = st.lists(st.lists(st.sampled_from("abc"), max_size=4), min_size=1, max_size=12)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None, max_examples=60)
@given(ttl_steps, st.integers(1, 3), st.integers(1, 5))
def test_a_key_idle_past_its_ttl_starts_new_totals_whenever_eviction_runs(
        batches: list[list[str]], ttl: int, evict_every: int) -> None:
    op = AggregateOp(("user",), (Aggregation("n", "count"),), ttl_steps=ttl)
    schema = pa.schema([("user", pa.string()), (ROWS, pa.int64()), ("n", pa.int64())])
    state = BACKEND[0].create("agg.0", aggregate.state_schema(partial(schema=schema), op), ["user"], index=STEP)
    model: dict[str, tuple[int, int]] = {}  # key -> (count, last step)
    for step, batch in enumerate(batches, start=1):
        counts = {k: batch.count(k) for k in set(batch)}
        part = partial(*[(k, c, c) for k, c in sorted(counts.items())], schema=schema)
        updated = aggregate.merge(state, part, op, step)
        for k, c in counts.items():
            held, last = model.get(k, (0, step))
            model[k] = ((held if step - last <= ttl else 0) + c, step)
        assert by_key(updated) == {k: {"n": model[k][0]} for k in counts}
        if step % evict_every == 0:
            state.evict(step - ttl)
            kept = {k for k, (_, last) in model.items() if last >= step - ttl}
            assert set(by_key(state)) == kept
    state.close()
