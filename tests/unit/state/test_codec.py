"""Rows through the byte codec come back equal, nulls and all; equal keys give equal bytes."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ftpipeline.state.codec import RowCodec

SCHEMA = pa.schema([("user", pa.string()), ("n", pa.int64()), ("x", pa.float64()), ("ok", pa.bool_()),
                    ("day", pa.date32()), ("at", pa.timestamp("us", tz="UTC")), ("amount", pa.decimal128(12, 2)),
                    ("small", pa.int32()), ("blob", pa.binary())])

row = st.fixed_dictionaries({
    "user": st.none() | st.text(max_size=8),
    "n": st.none() | st.integers(-2**63, 2**63 - 1),
    "x": st.none() | st.floats(allow_nan=False),
    "ok": st.none() | st.booleans(),
    "day": st.none() | st.dates(),
    "at": st.none() | st.datetimes(min_value=dt.datetime(1970, 1, 1), max_value=dt.datetime(2200, 1, 1),
                                   timezones=st.just(dt.timezone.utc)),
    "amount": st.none() | st.decimals(min_value=-10**9, max_value=10**9, places=2),
    "small": st.none() | st.integers(-2**31, 2**31 - 1),
    "blob": st.none() | st.binary(max_size=6),
})


@settings(max_examples=100, deadline=None)
@given(st.lists(row, max_size=30))
def test_rows_round_trip(rows: list[dict[str, object]]) -> None:
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    codec = RowCodec(SCHEMA)
    back = codec.decode(codec.encode(table))
    assert back.equals(table)


def test_a_sliced_table_encodes_its_own_rows() -> None:
    table = pa.table({"k": pa.array([1, 2, 3, 4], pa.int64()), "s": ["a", None, "c", "dd"]})
    codec = RowCodec(table.schema)
    assert codec.decode(codec.encode(table.slice(1, 2))).equals(table.slice(1, 2).combine_chunks())


@given(st.lists(st.tuples(st.text(max_size=4), st.text(max_size=4)), min_size=2, max_size=2))
def test_keys_are_equal_exactly_when_their_bytes_are(pairs: list[tuple[str, str]]) -> None:
    schema = pa.schema([("a", pa.string()), ("b", pa.string())])
    codec = RowCodec(schema)
    table = pa.Table.from_pylist([{"a": a, "b": b} for a, b in pairs], schema=schema)
    one, two = codec.encode(table)
    assert (one == two) == (pairs[0] == pairs[1])


def test_a_type_without_a_layout_is_refused_by_name() -> None:
    with pytest.raises(TypeError, match="list<item: int64>"):
        RowCodec(pa.schema([("xs", pa.list_(pa.int64()))]))


def test_decimals_keep_their_scale() -> None:
    table = pa.table({"d": pa.array([Decimal("1.25"), None, Decimal("-3.50")], pa.decimal128(9, 2))})
    codec = RowCodec(table.schema)
    assert codec.decode(codec.encode(table)).column("d").to_pylist() == [Decimal("1.25"), None, Decimal("-3.50")]
