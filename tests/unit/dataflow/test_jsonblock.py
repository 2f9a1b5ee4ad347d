"""Arrow's block reader gives json_row's rows and dead letters, or stands aside (dataflow/sources/jsonblock.py)."""

from __future__ import annotations

import json
import math
from typing import Any

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from ftpipeline.dataflow.sources.files import ARROW_TYPES, BadRecord, json_row
from ftpipeline.dataflow.sources.jsonblock import _ARROW_ONLY, MIN_CHUNK, BlockReader, arrow_only, parse_block

SPEC = [("user", "string"), ("n", "long"), ("x", "double"), ("ok", "boolean")]
SCHEMA = pa.schema([pa.field(n, ARROW_TYPES[t]) for n, t in SPEC])

# what the two parsers disagree on, each alone in a record (tried with Python's and Arrow's parser)
TRICKY = [b'{"x":Inf}', b'{"x":-Inf}', b'{"q":[Inf]}', b'\xef\xbb\xbf{"n":1}', b'{"n":1}{"n":2}', b'', b'  ', b'\x0c',
          b'{"n":1.0}', b'{"n":1e2}', b'{"n":1,"n":2}', b'{"user":"\\ud800"}', b'{"x":1e400}', b'{"x":NaN}',
          b'{"x":Infinity}', b'{"n":9223372036854775808}', b'{"n":true}', b'{"ok":1}', b'[1]', b'{"n":01}',
          b'{"user":"\xff"}', b'{"n":1}\n{"n":2}', b'{"n":1}\n', b'{"n":1,}', b'null', b'{"user":"a\\nb"}']

value = st.one_of(st.none(), st.booleans(), st.integers(-(2**64), 2**64), st.floats(allow_nan=False),
                  st.text(max_size=6))
record = st.one_of(
    st.fixed_dictionaries({}, optional={"user": value, "n": value, "x": value, "ok": value, "extra": value})
    .map(lambda d: json.dumps(d).encode()),
    st.fixed_dictionaries({"user": st.text(max_size=8), "n": st.integers(-(2**63), 2**63 - 1),
                           "x": st.floats(allow_nan=False, allow_infinity=False), "ok": st.booleans()})
    .map(lambda d: json.dumps(d).encode()),
    st.sampled_from(TRICKY),
    st.binary(max_size=8),
)


def one_by_one(records: list[bytes], dead: list[tuple[int, str]]) -> Any:
    def parse(i: int, j: int) -> pa.Table:
        columns: list[list[Any]] = [[] for _ in SPEC]
        for r in range(i, j):
            try:
                row = json_row(records[r], SPEC)
            except BadRecord as bad:
                dead.append((r, str(bad)))
                continue
            for column, v in zip(columns, row):
                column.append(v)
        return pa.Table.from_arrays([pa.array(c, type=f.type) for c, f in zip(columns, SCHEMA)], schema=SCHEMA)
    return parse


def rows(table: pa.Table) -> list[tuple[Any, ...]]:
    """NaN as a value that equals itself."""
    return [tuple("NaN" if isinstance(v, float) and math.isnan(v) else v for v in r.values())
            for r in table.to_pylist()]


def both_ways(records: list[bytes]) -> None:
    fast_dead: list[tuple[int, str]] = []
    slow_dead: list[tuple[int, str]] = []
    fast = BlockReader().read(len(records), lambda i, j: parse_block(b"\n".join(records[i:j]), j - i, SCHEMA),
                        one_by_one(records, fast_dead))
    slow = one_by_one(records, slow_dead)(0, len(records))
    assert fast.schema.equals(SCHEMA)
    assert rows(fast) == rows(slow)
    assert fast_dead == slow_dead


@settings(max_examples=300, deadline=None)
@given(st.lists(record, max_size=12))
def test_a_small_block_reads_as_json_row_reads_it(records: list[bytes]) -> None:
    both_ways(records)


GOOD = [json.dumps({"user": f"u{i}", "n": i, "x": i / 3, "ok": i % 2 == 0}).encode() for i in range(3 * MIN_CHUNK)]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, len(GOOD)), record), max_size=5))
def test_a_large_block_with_bad_records_reads_as_json_row_reads_it_chunk_by_chunk(
        inserted: list[tuple[int, bytes]]) -> None:
    records = list(GOOD)
    for at, r in sorted(inserted, reverse=True):
        records.insert(at, r)
    both_ways(records)


def test_each_record_arrow_takes_and_json_row_does_not_keeps_the_block_from_arrow() -> None:
    good = b'{"user":"a","n":1,"x":0.5,"ok":true}'
    assert parse_block(b"\n".join([good] * 3), 3, SCHEMA) is not None  # the fast path is taken at all
    for tricky in TRICKY:
        block = b"\n".join([good, tricky, good])
        answer = parse_block(block, 3, SCHEMA)
        if answer is not None:  # Arrow may read it only where json_row reads the same
            assert rows(answer) == rows(one_by_one([good, tricky, good], [])(0, 3)), tricky
        both_ways([good, tricky, good])


def test_clean_chunks_of_a_block_with_one_bad_record_are_read_by_arrow() -> None:
    good = [json.dumps({"user": f"u{i}", "n": i}).encode() for i in range(4 * MIN_CHUNK)]
    records = [*good[:MIN_CHUNK], b"{not json", *good[MIN_CHUNK:]]
    calls: list[tuple[int, int]] = []
    dead: list[tuple[int, str]] = []
    slow = one_by_one(records, dead)

    def counted(i: int, j: int) -> pa.Table:
        calls.append((i, j))
        return slow(i, j)

    table = BlockReader().read(len(records), lambda i, j: parse_block(b"\n".join(records[i:j]), j - i, SCHEMA), counted)
    assert table.num_rows == len(good) and [d[0] for d in dead] == [MIN_CHUNK]
    assert sum(j - i for i, j in calls) < len(records) // 2, calls  # only the bad record's chunk went slowly


def test_a_source_whose_records_are_often_bad_rests_from_arrow_for_its_next_blocks() -> None:
    """2% bad records: every part of a block is refused, each refusal a parse thrown away."""
    records = [b"{not json" if i % 50 == 0 else GOOD[i % len(GOOD)] for i in range(20 * MIN_CHUNK)]
    tries: list[tuple[int, int]] = []

    def block(i: int, j: int) -> pa.Table | None:
        tries.append((i, j))
        return parse_block(b"\n".join(records[i:j]), j - i, SCHEMA)

    reader, dead = BlockReader(), []
    first = reader.read(len(records), block, one_by_one(records, dead))
    assert first.num_rows == len(records) - len(dead) and len(tries) == 1 + 3  # the whole, then 3 parts
    tries.clear()
    for _ in range(BlockReader.REST_BLOCKS):
        reader.read(len(records), block, one_by_one(records, []))
    assert tries == []
    reader.read(len(records), block, one_by_one(records, []))
    assert tries[0] == (0, len(records)), "then tried again"


@given(st.lists(st.sampled_from([b"{", b"}", b"\n", b" ", b"\t", b"\r", b"Inf", b"inity", b"\xef\xbb\xbf", b"a",
                                 b'"x":1', b"null"]), max_size=30))
def test_the_quick_check_answers_as_the_pattern(pieces: list[bytes]) -> None:
    block = b"".join(pieces)
    assert arrow_only(block) == (_ARROW_ONLY.search(block) is not None)
