"""The oracle's comparison: multisets of rows, floats within the documented tolerance."""

from __future__ import annotations

import random

import pyarrow as pa

from ftpipeline.oracle import FLOAT_REL_TOL, Comparison, compare_letters, compare_tables
from ftpipeline.oracle.files import Letter


def _table(rows: list[tuple[int, str, float | None]]) -> pa.Table:
    return pa.table({"step": [r[0] for r in rows], "k": [r[1] for r in rows],
                     "total": pa.array([r[2] for r in rows], pa.float64())})


def test_a_double_sum_in_another_order_equals_the_oracle() -> None:
    rng = random.Random(7)
    values = [rng.uniform(-1e6, 1e6) * 10 ** rng.randint(-8, 3) for _ in range(20_000)]
    forward = sum(values)
    shuffled = values[:]
    rng.shuffle(shuffled)
    backward = 0.0
    for v in shuffled:
        backward += v
    assert forward != backward  # the premise: the last bits differ
    result = compare_tables("out", _table([(1, "a", forward)]), _table([(1, "a", backward)]))
    assert result.equal, result
    assert "equals the oracle" in str(result)


def test_floats_further_apart_than_the_tolerance_differ() -> None:
    result = compare_tables("out", _table([(1, "a", 100.0)]), _table([(1, "a", 100.0 * (1 + 100 * FLOAT_REL_TOL))]))
    assert (result.missing, result.extra, result.equal) == (1, 1, False)
    assert "DIFFERS" in str(result)


def test_missing_extra_and_duplicated_rows_are_counted() -> None:
    expected = _table([(1, "a", 1.0), (1, "b", 2.0), (2, "a", 3.0), (2, "c", None)])
    actual = _table([(1, "a", 1.0), (1, "a", 1.0), (2, "a", 3.0 + 1e-12), (2, "c", None), (3, "z", 0.0)])
    result = compare_tables("out", expected, actual)
    assert result == Comparison("out", 4, 5, missing=1, extra=2, duplicates=1)


def test_exact_columns_are_compared_exactly() -> None:
    result = compare_tables("out", _table([(1, "a", 1.0)]), _table([(2, "a", 1.0)]))
    assert (result.missing, result.extra) == (1, 1)


def test_rows_pair_within_a_group_whatever_their_order() -> None:
    rows = [(1, "a", float(v)) for v in (5, 1, 3, 3, 2)]
    perturbed = [(s, k, v * (1 + FLOAT_REL_TOL / 10)) for s, k, v in reversed(rows)]
    result = compare_tables("out", _table(rows), _table(perturbed))
    assert result.equal and result.duplicates == 0, result  # 3.0 twice on both sides: expected, not duplicated


def test_dead_letters_compare_as_multisets() -> None:
    src = Letter("orders", 2, "/in/a.jsonl:4", "{not json")
    agg = Letter("agg", 3, "agg", '{"k": null, "v": 1}')
    same_row_other_channel = Letter("agg", 3, "agg.1", '{"v": 1, "k": null, "_step": 3}')
    assert compare_letters([src, agg], [src, same_row_other_channel], {"orders"}).equal
    twice = compare_letters([src, agg], [src, src, agg], {"orders"})
    assert (twice.equal, twice.extra, twice.duplicates) == (False, 1, 1)
    assert "dead letters: DIFFERS from the oracle: 3 records (expected 2)" in str(twice)
    moved = compare_letters([src], [Letter("orders", 3, src.location, src.record)], {"orders"})
    assert (moved.missing, moved.extra) == (1, 1)


def test_a_late_record_missed_at_the_end_of_input_compares_without_an_overflow() -> None:
    """A record judged against the end-of-input watermark (2^63 - 1 us: no date Python holds) is compared by its
    value, not turned into a datetime (that ended ``--verify`` in a traceback)."""
    end = pa.array([2**63 - 1, 5], pa.int64()).cast(pa.timestamp("us", tz="UTC"))
    table = pa.table({"k": ["a", "b"], "late_watermark": end})
    assert compare_tables("late", table, table).equal
    other = table.set_column(1, "late_watermark", pa.array([2**63 - 2, 5], pa.int64()).cast(end.type))
    assert compare_tables("late", table, other).missing == 1


def test_the_batch_truth_says_equal_differs_or_why_it_was_not_compared() -> None:
    equal = Comparison("out", 5, 5, 0, 0, 0, what="batch truth")
    assert str(equal) == ("out: output equals the batch truth (the same query as one batch, no watermark): 5 rows "
                          "(expected 5), 0 missing, 0 extra")
    differs = Comparison("out", 5, 5, 1, 1, 0, what="batch truth", note="the run found 3 late records", binding=False)
    assert "DIFFERS from the batch truth" in str(differs) and str(differs).endswith("; the run found 3 late records")
    assert differs.holds and not differs.equal
    skipped = Comparison("out", 0, 0, 0, 0, 0, what="batch truth", note="not compared: stage 'u' deduplicates",
                         binding=False)
    assert str(skipped) == "out: not compared with the batch truth: stage 'u' deduplicates"
