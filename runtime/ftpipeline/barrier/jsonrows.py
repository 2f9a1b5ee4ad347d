"""A batch's rows as the JSON text ``json.dumps`` gives each of them, made a column at a time by Arrow.

Why: a Kafka sink writes every row as a JSON value. ``json.dumps`` of each row's
dict costs ~10 µs a row — half a core at 50k rows/s, in the sidecar that also
releases the step. Arrow's kernels make the same text for a whole column at once
(escape, cast, join), where the text is sure to be ``json.dumps``'s:

    column --string, every character printable ASCII--> quoted, '\\' and '"' escaped
    column --integer--> its decimal digits
    column --boolean--> true / false
    (a null in any of them--> null)
    column --anything else (floats, non-ASCII or control characters, timestamps, nested,
             binary), or a column name twice--> None: the caller dumps the rows one at a time

``tests/unit/barrier/test_jsonrows.py`` compares both on random batches (Hypothesis).
"""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.compute as pc

_NOT_PLAIN = "[^\\x20-\\x7e]"  # what json.dumps writes as \\uXXXX (ensure_ascii) or \\n, \\t, ...


def _fragment(column: pa.Array) -> pa.Array | None:
    """The column's values as JSON text (null as ``null``), or None if Arrow's text could differ."""
    t = column.type
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        if pc.any(pc.match_substring_regex(column, _NOT_PLAIN)).as_py():
            return None
        escaped = pc.replace_substring(pc.replace_substring(column, "\\", "\\\\"), '"', '\\"')
        text = pc.binary_join_element_wise('"', escaped, '"', "")
    elif pa.types.is_integer(t):
        text = pc.cast(column, pa.string())
    elif pa.types.is_boolean(t):
        text = pc.if_else(column, "true", "false")
    elif pa.types.is_null(t):
        return pa.array(["null"] * len(column), pa.string())
    else:
        return None
    return pc.fill_null(text.cast(pa.string()), "null")


def json_values(batch: pa.RecordBatch) -> list[bytes] | None:
    """Each row's ``json.dumps(row, separators=(",", ":"))``, encoded; None where a column needs that."""
    names = batch.schema.names
    if len(set(names)) != len(names):
        return None
    pieces: list[pa.Array | str] = []
    for i, (name, column) in enumerate(zip(names, batch.columns)):
        text = _fragment(column)
        if text is None:
            return None
        pieces += [("{" if i == 0 else ",") + json.dumps(name) + ":", text]
    if not pieces:
        return [b"{}"] * batch.num_rows
    joined = pc.binary_join_element_wise(*pieces, "}", "")
    return joined.cast(pa.binary()).to_pylist()  # type: ignore[no-any-return]


def records(batch: pa.RecordBatch, key: tuple[str, ...]) -> list[tuple[bytes | None, bytes]] | None:
    """``barrier/kafka.py``'s (key, value) records of the batch's rows: the value as ``json_values``; one key
    column's value as its text (a string as it is, null as no key), several as a JSON list. None where a
    column needs the row-at-a-time path."""
    values = json_values(batch)
    if values is None:
        return None
    if not key:
        return [(None, v) for v in values]
    if len(key) == 1:
        column = batch.column(key[0])
        if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
            keys = column.cast(pa.binary()).to_pylist()
        else:
            text = _fragment(column)
            if text is None:
                return None
            keys = pc.if_else(pc.is_null(column), pa.scalar(None, pa.binary()), text.cast(pa.binary())).to_pylist()
        return list(zip(keys, values))
    fragments = [_fragment(batch.column(k)) for k in key]
    if any(f is None for f in fragments):
        return None
    pieces: list[pa.Array | str] = []
    for i, f in enumerate(fragments):
        pieces += ["[" if i == 0 else ",", f]
    listed = pc.binary_join_element_wise(*pieces, "]", "").cast(pa.binary()).to_pylist()
    return list(zip(listed, values))
