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
        return cast(list[bytes], self.encode_array(table).to_pylist()) if table.num_rows else []

    def encode_array(self, table: pa.Table, prefixed: bool = False) -> pa.Array:
        """The rows of :meth:`encode` as one binary array; ``prefixed``: each row after its length (4 bytes,
        little-endian), as rows kept end to end in one value are (a join's held rows of a key)."""
        n = table.num_rows
        if n == 0:
            return pa.array([], pa.binary())
        parts: list[np.ndarray] = []
        for i in range(len(self.schema)):
            parts.append(table.column(i).is_null().to_numpy(zero_copy_only=False).astype(np.uint8).reshape(n, 1))
        for i in self.fixed:
            parts.append(_fixed_bytes(table.column(i), self.schema.field(i).type, self.widths[i]))
        if not self.var:
            if prefixed:
                parts.insert(0, _le32(np.full(n, self.head)))
            head = np.ascontiguousarray(np.hstack(parts))
            width = head.shape[1]
            offsets = np.arange(0, (n + 1) * width, width, dtype=np.int64)
            return pa.Array.from_buffers(pa.large_binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(head)])
        head = np.ascontiguousarray(np.hstack(parts))
        heads = pa.FixedSizeBinaryArray.from_buffers(pa.binary(self.head), n, [None, pa.py_buffer(head)])
        pieces: list[Any] = [pc.cast(heads, pa.binary())]
        total = np.full(n, self.head, np.int64)
        for i in self.var:
            values = pc.cast(table.column(i), pa.binary()).combine_chunks().fill_null(b"")
            lengths = np.diff(np.frombuffer(values.buffers()[1], dtype=np.int32)[values.offset:values.offset + n + 1])
            total += 4 + lengths
            pieces.append(_fixed4(_le32(lengths)))
            pieces.append(values)
        if prefixed:
            pieces.insert(0, _fixed4(_le32(total)))
        return pc.binary_join_element_wise(*pieces, b"")  # one row's pieces, end to end

    def decode(self, rows: Sequence[bytes]) -> pa.Table:
        """The table of ``rows`` (each from :meth:`encode` of this schema)."""
        return self.decode_array(pa.array(rows, pa.binary())) if len(rows) else self.schema.empty_table()

    def decode_prefixed(self, blobs: Sequence[bytes]) -> pa.Table:
        """The rows kept end to end in ``blobs``, each after its length (``encode_array(prefixed=True)``). Rows of
        fixed width (no string or binary column) are cut apart at once; others one length at a time."""
        if not self.var:
            data = np.frombuffer(b"".join(blobs), np.uint8)
            n = len(data) // (4 + self.head)
            matrix = np.ascontiguousarray(data.reshape(n, 4 + self.head)[:, 4:])
            offsets = np.arange(0, (n + 1) * self.head, self.head, dtype=np.int64)
            return self.decode_array(pa.Array.from_buffers(pa.large_binary(), n, [None, pa.py_buffer(offsets),
                                                                                  pa.py_buffer(matrix)]))
        rows = []
        for blob in blobs:
            at, end = 0, len(blob)
            while at < end:
                size = int.from_bytes(blob[at:at + 4], "little")
                rows.append(blob[at + 4:at + 4 + size])
                at += 4 + size
        return self.decode(rows)

    def decode_array(self, packed: pa.Array) -> pa.Table:
        """The table of the rows in ``packed`` (a binary or large binary array of :meth:`encode`'s rows)."""
        n = len(packed)
        if n == 0:
            return self.schema.empty_table()
        wide = pa.types.is_large_binary(packed.type)
        starts = np.frombuffer(packed.buffers()[1], dtype=np.int64 if wide else np.int32)[
            packed.offset:packed.offset + n + 1].astype(np.int64)
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


def _le32(values: np.ndarray) -> np.ndarray:
    """Each value as 4 little-endian bytes: an (n, 4) byte matrix."""
    return np.ascontiguousarray(values.astype("<u4")).view(np.uint8).reshape(len(values), 4)


def _fixed4(matrix: np.ndarray) -> pa.Array:
    """An (n, 4) byte matrix as a binary array of 4-byte values."""
    n = matrix.shape[0]
    return pc.cast(pa.FixedSizeBinaryArray.from_buffers(pa.binary(4), n, [None, pa.py_buffer(
        np.ascontiguousarray(matrix))]), pa.binary())


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
