"""Spark's ``hash`` (Murmur3 x86 32-bit, seed 42) over Arrow columns, in numpy, without a Spark job.

Why: a hash edge sends each row to channel ``pmod(hash(keys), n)``. Computed
by Spark, that is a Spark job per task even where the task runs no user
function (a source, an aggregate's output): about 80 ms of fixed cost per
task, the largest part of a step once a pipeline has more channels than
cores. The same function over the task's Arrow table, vectorised, costs a
few milliseconds, and needs no JVM round trip.

Why Spark's function and not another: it is the one every route, snapshot
re-partitioning (``worker/rekey.py``) and checkpoint already written used,
so nothing changes for a running pipeline, and Spark's own ``hash`` checks
this module value for value (``tests/integration/dataflow/test_murmur3.py``).

The function, as Spark's ``Murmur3Hash`` computes it for a row: start from
the seed; for each key column in order, a null leaves the running hash as
it is, a value hashes with the running hash as its seed:

- int8/16/32, date32, booleans (1/0): ``hashInt``;
- int64 and timestamps (as microseconds): ``hashLong`` (low word, then high);
- float32/float64: the IEEE bits, ``-0.0`` as ``0.0`` (``hashInt``/``hashLong``);
- strings: their UTF-8 bytes, whole 4-byte little-endian words, then each
  remaining byte *signed* as a word of its own (Spark's variant, unlike the
  reference tail), finalised with the byte length.

Other types (decimals, binary, nested) return ``None``: the caller asks Spark.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

SEED = 42
_C1, _C2 = np.uint32(0xCC9E2D51), np.uint32(0x1B873593)
_U = np.uint32


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << _U(r)) | (x >> _U(32 - r))


def _mix_k1(k1: np.ndarray) -> np.ndarray:
    return _rotl(k1 * _C1, 15) * _C2


def _mix_h1(h1: np.ndarray, k1: np.ndarray) -> np.ndarray:
    return _rotl(h1 ^ k1, 13) * _U(5) + _U(0xE6546B64)


def _fmix(h1: np.ndarray, length: np.ndarray | int) -> np.ndarray:
    h1 = h1 ^ np.asarray(length, dtype=np.uint32)
    h1 = (h1 ^ (h1 >> _U(16))) * _U(0x85EBCA6B)
    h1 = (h1 ^ (h1 >> _U(13))) * _U(0xC2B2AE35)
    out: np.ndarray = h1 ^ (h1 >> _U(16))
    return out


def _hash_int(values: np.ndarray, seed: np.ndarray) -> np.ndarray:
    return _fmix(_mix_h1(seed, _mix_k1(values.astype(np.uint32))), 4)


def _hash_long(values: np.ndarray, seed: np.ndarray) -> np.ndarray:
    bits = values.astype(np.int64).view(np.uint64)
    h1 = _mix_h1(seed, _mix_k1((bits & np.uint64(0xFFFFFFFF)).astype(np.uint32)))
    return _fmix(_mix_h1(h1, _mix_k1((bits >> np.uint64(32)).astype(np.uint32))), 8)


def _hash_strings(column: pa.Array, seed: np.ndarray) -> np.ndarray:
    """Spark's ``hashUnsafeBytes`` of each value's UTF-8 bytes (nulls hashed too: the caller masks them)."""
    if pa.types.is_string(column.type):
        column = column.cast(pa.large_string())
    offsets_buf, data_buf = column.buffers()[1], column.buffers()[2]
    offsets = np.frombuffer(offsets_buf, dtype=np.int64)[column.offset:column.offset + len(column) + 1]
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    starts, lengths = offsets[:-1], np.diff(offsets)
    h1 = seed.copy()
    words = lengths // 4
    for i in range(int(words.max(initial=0))):
        rows = np.nonzero(words > i)[0]
        at = starts[rows] + 4 * i
        word = (data[at].astype(np.uint32) | (data[at + 1].astype(np.uint32) << _U(8))
                | (data[at + 2].astype(np.uint32) << _U(16)) | (data[at + 3].astype(np.uint32) << _U(24)))
        h1[rows] = _mix_h1(h1[rows], _mix_k1(word))
    tail = lengths % 4
    for j in range(int(tail.max(initial=0))):
        rows = np.nonzero(tail > j)[0]
        byte = data[starts[rows] + 4 * words[rows] + j].view(np.int8).astype(np.int32).view(np.uint32)
        h1[rows] = _mix_h1(h1[rows], _mix_k1(byte))
    return _fmix(h1, lengths.astype(np.uint32))


def _micros(column: pa.Array) -> np.ndarray:
    unit = column.type.unit
    values: np.ndarray = column.cast(pa.int64()).fill_null(0).to_numpy()
    scaled: dict[str, np.ndarray] = {"s": values * 1_000_000, "ms": values * 1_000, "us": values, "ns": values // 1_000}
    return scaled[unit]


def _column_hash(column: pa.Array, seed: np.ndarray) -> np.ndarray | None:
    """The running hash after ``column``; None for a type this module does not hash."""
    kind = column.type
    if pa.types.is_dictionary(kind):
        return _column_hash(column.dictionary_decode(), seed)
    if pa.types.is_null(kind):
        return seed
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        hashed = _hash_strings(column, seed)
    elif pa.types.is_boolean(kind):
        hashed = _hash_int(column.fill_null(False).to_numpy(zero_copy_only=False).astype(np.int32), seed)
    elif pa.types.is_int64(kind):
        hashed = _hash_long(column.fill_null(0).to_numpy(), seed)
    elif kind in (pa.int8(), pa.int16(), pa.int32()):
        hashed = _hash_int(column.fill_null(0).to_numpy().astype(np.int32), seed)
    elif pa.types.is_date32(kind):
        hashed = _hash_int(column.cast(pa.int32()).fill_null(0).to_numpy(), seed)
    elif pa.types.is_timestamp(kind):
        hashed = _hash_long(_micros(column), seed)
    elif pa.types.is_float32(kind):
        values = column.fill_null(0.0).to_numpy().astype(np.float32)
        values = np.where(np.isnan(values), np.float32(np.nan), np.where(values == 0, np.float32(0), values))
        hashed = _hash_int(values.view(np.int32), seed)
    elif pa.types.is_float64(kind):
        values = column.fill_null(0.0).to_numpy().astype(np.float64)  # NaNs as Java's one NaN, -0.0 as 0.0
        hashed = _hash_long(np.where(np.isnan(values), np.nan, np.where(values == 0, 0.0, values)).view(np.int64), seed)
    else:
        return None
    if column.null_count:
        hashed = np.where(column.is_null().to_numpy(zero_copy_only=False), seed, hashed)
    return hashed


def spark_hash(table: pa.Table, keys: list[str] | tuple[str, ...]) -> np.ndarray | None:
    """Spark's ``hash(*keys)`` of every row of ``table`` as int32; None when a key's type is not hashed here."""
    h = np.full(table.num_rows, SEED, dtype=np.uint32)
    for key in keys:
        column = table.column(key)
        chunk = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
        got = _column_hash(chunk, h)
        if got is None:
            return None
        h = got
    return h.view(np.int32)


def channels(table: pa.Table, keys: list[str] | tuple[str, ...], parallelism: int) -> pa.Array | None:
    """``pmod(hash(*keys), parallelism)`` of every row, as int32; None when Spark must compute it."""
    h = spark_hash(table, keys)
    if h is None:
        return None
    return pa.array(np.mod(h.astype(np.int64), parallelism).astype(np.int32))

