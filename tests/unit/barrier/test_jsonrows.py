"""Arrow's column-at-a-time JSON records equal the row-at-a-time ``json.dumps`` ones, on random batches."""

from __future__ import annotations

from typing import Any
from unittest.mock import patch

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from ftpipeline.barrier import jsonrows
from ftpipeline.barrier.kafka import encode

TYPES = {"s": pa.string(), "i": pa.int64(), "j": pa.int32(), "u": pa.uint64(), "b": pa.bool_(), "f": pa.float64(),
         "t": pa.timestamp("us")}
VALUES = {"s": st.text(max_size=6) | st.text(st.sampled_from('ab"\\ {}:,\n'), max_size=6),
          "i": st.integers(-2**63, 2**63 - 1), "j": st.integers(-2**31, 2**31 - 1), "u": st.integers(0, 2**64 - 1),
          "b": st.booleans(), "f": st.floats(allow_nan=False, allow_infinity=False),
          "t": st.integers(0, 2**40)}


def _rows_way(batch: pa.RecordBatch, key: tuple[str, ...]) -> list[tuple[bytes | None, bytes]]:
    """What ``encode`` makes with the column path turned off (every row ``json.dumps``'d): the reference."""
    with patch.object(jsonrows, "records", lambda batch, key: None):
        return list(encode(pa.Table.from_batches([batch]), key))


PLAIN = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=8)


@st.composite
def batches(draw: Any, plain: bool = False) -> tuple[pa.RecordBatch, tuple[str, ...]]:
    kinds = draw(st.lists(st.sampled_from("sijub" if plain else sorted(TYPES)), min_size=1, max_size=4))
    rows = draw(st.integers(0, 8))
    columns = {}
    for n, kind in enumerate(kinds):
        values = draw(st.lists(st.none() | (PLAIN if plain and kind == "s" else VALUES[kind]), min_size=rows,
                               max_size=rows))
        columns[f"{kind}{n}"] = pa.array(values, TYPES[kind])
    batch = pa.RecordBatch.from_pydict(columns)
    key = tuple(draw(st.lists(st.sampled_from(list(columns)), max_size=2, unique=True)))
    return batch, key


@settings(max_examples=300, deadline=None)
@given(batches())
def test_column_at_a_time_records_equal_the_row_at_a_time_ones(found: tuple[pa.RecordBatch, tuple[str, ...]]) -> None:
    batch, key = found
    made = jsonrows.records(batch, key)
    if made is not None:
        assert made == _rows_way(batch, key)


@settings(max_examples=200, deadline=None)
@given(batches(plain=True))
def test_batches_of_plain_columns_all_take_the_column_path(found: tuple[pa.RecordBatch, tuple[str, ...]]) -> None:
    batch, key = found
    assert jsonrows.records(batch, key) == _rows_way(batch, key)


def test_plain_columns_take_the_column_path_and_others_do_not() -> None:
    plain = pa.RecordBatch.from_pydict({"user": ["u1", 'a"b\\c', None], "n": [1, None, -3], "ok": [True, False, None]})
    assert jsonrows.records(plain, ("user",)) == _rows_way(plain, ("user",))
    assert jsonrows.records(plain, ("user",))[1] == (b'a"b\\c', b'{"user":"a\\"b\\\\c","n":null,"ok":false}')
    assert jsonrows.records(pa.RecordBatch.from_pydict({"s": ["é"]}), ()) is None  # json.dumps writes \u00e9
    assert jsonrows.records(pa.RecordBatch.from_pydict({"s": ["a\nb"]}), ()) is None
    assert jsonrows.records(pa.RecordBatch.from_pydict({"x": [1.0]}), ()) is None  # 1.0, where Arrow writes 1
