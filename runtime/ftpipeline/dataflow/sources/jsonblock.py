"""JSON records parsed a block at a time by Arrow's reader, wherever its answer is sure to be ``json_row``'s.

Why: ``files.json_row`` parses one record at a time with ``json.loads`` —
about 8 µs a record, 0.4 s of a 50k-row step, the largest part of a JSON
source's task (a JSON Lines file, a Kafka topic). Arrow's reader parses a
block five to six times faster, but it is another parser: it accepts what
``json_row`` refuses (``Inf``, a byte-order mark, two objects on one line, a
blank line, ``null``) and refuses what ``json_row`` accepts (``1.0`` or ``1e2`` for a
long, a key given twice, a lone surrogate escape, a number beyond a double).
Nor does it check that strings are UTF-8. So a block goes to Arrow only
where the two cannot differ:

    block --'Inf' (not 'Infinity'), a BOM, bytes not UTF-8, or a line not opening an object ('{')
            in it--> one record at a time
    block --Arrow refuses it--> again in parts (a bad record costs its part one record at a time);
            every part refused: the source's next blocks one record at a time (``BlockReader``)
    block --Arrow answers, one row per record--> that table
    block --Arrow answers, another number of rows--> one record at a time

A record Arrow reads as more than one row (``{..}{..}``) is caught by the
count: every line opens an object, so none is read as zero rows, and the
rows can only equal the records if each gave one. Records read one at a time are named in
dead letters exactly as before. ``tests/unit/dataflow/test_jsonblock.py``
compares both ways on random records (Hypothesis).
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable

import pyarrow as pa
import pyarrow.json as pj

# What Arrow's reader takes and json.loads does not (checked on bytes, inside strings too: a false alarm
# only costs the block its fast path)
# — and a line that does not open an object: Arrow reads a blank line as no row and ``null`` as a row of nulls
_ARROW_ONLY = re.compile(rb"Inf(?!inity)|\xef\xbb\xbf|(?:^|\n)[ \t\r]*(?![ \t\r{])")
_INF = re.compile(rb"Inf(?!inity)")
CHUNKS = 16       # a block Arrow refused is tried again in this many parts
MIN_CHUNK = 128   # records: smaller parts are read one record at a time


def arrow_only(block: bytes) -> bool:
    """``_ARROW_ONLY.search(block)``, answered by byte searches where they can: the pattern tried at every
    byte cost more than Arrow's parse of the block."""
    if b"\xef\xbb\xbf" in block or (b"Inf" in block and _INF.search(block) is not None):
        return True
    if block.startswith(b"{") and block.count(b"\n") == block.count(b"\n{"):
        return False  # every line opens an object at its first byte
    return _ARROW_ONLY.search(block) is not None


def parse_block(block: bytes, count: int, schema: pa.Schema) -> pa.Table | None:
    """The ``count`` records of ``block`` (a record a line) as a table of ``schema``, or None where Arrow's
    answer might not be ``json_row``'s."""
    if count == 0 or arrow_only(block):
        return None
    if not block.isascii():  # Arrow's reader does not check that its strings are UTF-8
        try:
            block.decode("utf-8")
        except UnicodeDecodeError:
            return None
    options = pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
    try:
        table = pj.read_json(io.BytesIO(block), read_options=pj.ReadOptions(use_threads=False,
                                                                            block_size=max(1 << 20, len(block) + 1)),
                             parse_options=options)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, UnicodeDecodeError):
        return None
    if table.num_rows != count:
        return None
    table = table.select(schema.names)
    return table if table.schema.equals(schema) else None


class BlockReader:
    """One source's reads of blocks of records (it keeps whether Arrow is worth trying).

    A block Arrow refuses is tried again in parts: where bad records are rare, only their parts are
    read a record at a time. Where they are common (every part refused), each refused try is a parse
    thrown away: the parts left are read a record at a time, and so are the source's next
    ``REST_BLOCKS`` blocks before Arrow is tried again."""

    REST_BLOCKS = 8

    def __init__(self) -> None:
        self.resting = 0

    def read(self, count: int, block: Callable[[int, int], pa.Table | None],
             one_by_one: Callable[[int, int], pa.Table]) -> pa.Table:
        """The rows of records ``[0, count)``: ``block(i, j)`` is records ``[i, j)`` as ``parse_block`` reads
        them (None: not sure); ``one_by_one(i, j)`` parses them a record at a time (and keeps their dead
        letters)."""
        if self.resting:
            self.resting -= 1
            return one_by_one(0, count)
        whole = block(0, count) if count else None
        if whole is not None:
            return whole
        if count < 2 * MIN_CHUNK:
            return one_by_one(0, count)
        size = max(MIN_CHUNK, -(-count // CHUNKS))
        parts: list[pa.Table] = []
        refused = 0
        for i in range(0, count, size):
            j = min(count, i + size)
            part = None if refused >= 3 and refused == len(parts) else block(i, j)  # every try refused: stop
            if part is None:
                refused += 1
                part = one_by_one(i, j)
            parts.append(part)
        if refused == len(parts):
            self.resting = self.REST_BLOCKS
        return pa.concat_tables(parts)
