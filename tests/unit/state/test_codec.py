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


FIXED = pa.schema([f for f in SCHEMA if f.name not in ("user", "blob")])


@settings(max_examples=60, deadline=None)
@given(st.lists(row, max_size=30), st.lists(st.integers(1, 4), max_size=10), st.booleans())
def test_rows_kept_end_to_end_each_after_its_length_come_back_in_order(
        rows: list[dict[str, object]], cuts: list[int], fixed: bool) -> None:
    """A join holds a key's rows as one value (``encode_array(prefixed=True)``, cut into runs): read back whole
    by ``decode_prefixed``, at once for rows of one width, a length at a time for others. The stored bytes are
    each row's length then its ``encode`` bytes, whichever path wrote them."""
    schema = FIXED if fixed else SCHEMA
    table = pa.Table.from_pylist(rows, schema=SCHEMA).select(schema.names)
    codec = RowCodec(schema)
    encoded = codec.encode_array(table, prefixed=True)
    assert encoded.to_pylist() == [len(r).to_bytes(4, "little") + r for r in codec.encode(table)]
    runs, at = [], 0
    for size in [*cuts, len(rows)]:  # runs of rows, as keys hold them
        runs.append(b"".join(encoded.slice(at, size).to_pylist()))
        at += size
    assert codec.decode_prefixed(runs).equals(table)


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
