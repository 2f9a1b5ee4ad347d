"""Arrow rows as bytes, for a key-value store: one key and one value per row, a batch at a time.

A disk-backed store (``state.rocks``) holds each key of a keyed state as a
byte string and its row as another. The conversions run once per touched
key per step, so they are column-at-a-time, not row-at-a-time:

- a fixed-width column (integers, floats, dates, timestamps, decimals;
  booleans as one byte) is a slice of its Arrow data buffer, reshaped to
  one row per line with numpy and stacked beside the others;
- a variable-width column (strings, binary) is appended as a 4-byte length
  and its bytes (Arrow joins the pieces of every row in one call);
- each row starts with one validity byte per column (1 = null).

A value is the whole row (keys too), so a scan decodes rows without
decoding keys. A key is the key columns alone in the same layout, which
is unambiguous: the fixed part has one width per schema and each variable
part carries its length. Equal keys give equal bytes (null keys never reach
a state: ``aggregate.split_null_keys`` sends them to the dead letters).
"""

from __future__ import annotations

from decimal import Decimal
from collections.abc import Sequence
from typing import Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

def _is_var(kind: pa.DataType) -> bool:
    return bool(pa.types.is_string(kind) or pa.types.is_binary(kind) or pa.types.is_large_string(kind)
                or pa.types.is_large_binary(kind))


def _width(kind: pa.DataType) -> int:
    if pa.types.is_boolean(kind):
        return 1
    try:
        return int(kind.bit_width) // 8
    except ValueError as exc:
        raise TypeError(f"no byte layout for a state column of type {kind}") from exc


class RowCodec:
    """Encode and decode the rows of one schema."""

    def __init__(self, schema: pa.Schema) -> None:
        self.schema = schema
        self.fixed = [i for i, f in enumerate(schema) if not _is_var(f.type)]
        self.var = [i for i, f in enumerate(schema) if _is_var(f.type)]
        self.widths = {i: _width(schema.field(i).type) for i in self.fixed}
        self.head = len(schema) + sum(self.widths.values())  # validity bytes, then the fixed columns

    def encode(self, table: pa.Table) -> list[bytes]:
        """One byte string per row of ``table`` (whose columns are this schema's, in order)."""
        n = table.num_rows
        if n == 0:
            return []
        parts: list[np.ndarray] = []
        for i in range(len(self.schema)):
            parts.append(table.column(i).is_null().to_numpy(zero_copy_only=False).astype(np.uint8).reshape(n, 1))
        for i in self.fixed:
            parts.append(_fixed_bytes(table.column(i), self.schema.field(i).type, self.widths[i]))
        head = np.ascontiguousarray(np.hstack(parts))
        heads = pa.FixedSizeBinaryArray.from_buffers(pa.binary(self.head), n, [None, pa.py_buffer(head)])
        if not self.var:
            return cast(list[bytes], heads.to_pylist())
        pieces: list[Any] = [pc.cast(heads, pa.binary())]
        for i in self.var:
            values = pc.cast(table.column(i), pa.binary()).combine_chunks().fill_null(b"")
            lengths = np.diff(np.frombuffer(values.buffers()[1], dtype=np.int32)[values.offset:values.offset + n + 1])
            prefix = np.ascontiguousarray(lengths.astype("<u4")).view(np.uint8)
            pieces.append(pc.cast(pa.FixedSizeBinaryArray.from_buffers(pa.binary(4), n, [None, pa.py_buffer(prefix)]),
                                  pa.binary()))
            pieces.append(values)
        joined = pc.binary_join_element_wise(*pieces, b"")  # one row's pieces, end to end
        return cast(list[bytes], joined.to_pylist())

    def decode(self, rows: Sequence[bytes]) -> pa.Table:
        """The table of ``rows`` (each from :meth:`encode` of this schema)."""
        n = len(rows)
        if n == 0:
            return self.schema.empty_table()
        packed = pa.array(rows, pa.binary())
        starts = np.frombuffer(packed.buffers()[1], dtype=np.int32)[:n + 1].astype(np.int64)
        data = np.frombuffer(packed.buffers()[2], dtype=np.uint8) if packed.buffers()[2] is not None \
            else np.zeros(0, np.uint8)
        w = self.head
        matrix = data[starts[:-1, None] + np.arange(w)]  # every row's fixed part, (n, w)
        nulls = matrix[:, :len(self.schema)].astype(bool)
        columns: dict[int, pa.Array] = {}
        at = len(self.schema)
        for i in self.fixed:
            width = self.widths[i]
            raw = np.ascontiguousarray(matrix[:, at:at + width]).tobytes()
            at += width
            columns[i] = _fixed_array(raw, self.schema.field(i).type, nulls[:, i], n)
        position = starts[:-1] + w
        for i in self.var:
            lengths = data[position[:, None] + np.arange(4)].copy().view("<u4").reshape(n).astype(np.int64)
            begin = position + 4
            offsets = np.zeros(n + 1, np.int64)
            np.cumsum(lengths, out=offsets[1:])
            gather = np.repeat(begin - offsets[:-1], lengths) + np.arange(offsets[-1])
            values = pa.Array.from_buffers(pa.large_binary(), n, [None, pa.py_buffer(offsets),
                                                                  pa.py_buffer(data[gather].tobytes())])
            kind = self.schema.field(i).type
            column = pc.cast(values, kind)
            if nulls[:, i].any():
                column = pc.if_else(pa.array(nulls[:, i]), pa.nulls(n, kind), column)
            columns[i] = column
            position = begin + lengths
        return pa.Table.from_arrays([columns[i] for i in range(len(self.schema))], schema=self.schema)


def _fixed_bytes(column: pa.ChunkedArray, kind: pa.DataType, width: int) -> np.ndarray:
    """The column's values as an (n, width) byte matrix (nulls as zeros)."""
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if pa.types.is_boolean(kind):
        array = pc.cast(array, pa.int8())
    if array.null_count:
        zero = pa.scalar(Decimal(0), kind) if pa.types.is_decimal(kind) else pa.scalar(0, array.type)
        array = array.fill_null(zero)  # equal rows, equal bytes
    data = array.buffers()[1]
    raw = np.frombuffer(data, dtype=np.uint8)[array.offset * width:(array.offset + len(array)) * width]
    return raw.reshape(len(array), width)


def _fixed_array(data: bytes, kind: pa.DataType, nulls: np.ndarray, n: int) -> pa.Array:
    storage = pa.int8() if pa.types.is_boolean(kind) else kind
    array = pa.Array.from_buffers(storage, n, [None, pa.py_buffer(data)])
    if pa.types.is_boolean(kind):
        array = pc.cast(array, pa.bool_())
    if nulls.any():
        array = pc.if_else(pa.array(nulls), pa.nulls(n, kind), array)
    return array
