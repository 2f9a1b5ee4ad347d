"""The digest a keyed function's outputs are checked by: the rows as a multiset."""

from __future__ import annotations

import pyarrow as pa

from ftpipeline.lineage.determinism import rows_digest


def test_equal_rows_in_any_order_or_chunking_give_one_digest_and_any_change_another() -> None:
    table = pa.table({"k": ["a", "b", None, "a"], "n": [1, 2, 3, 1], "x": [0.5, None, 1.5, 0.5]})
    shuffled = pa.concat_tables([table.take([3, 2]), table.take([1, 0])])
    assert rows_digest(table) == rows_digest(shuffled)
    assert rows_digest(table) != rows_digest(table.take([0, 1, 2]))  # one of the equal rows less
    assert rows_digest(table) != rows_digest(table.set_column(1, "n", pa.array([1, 2, 3, 2])))
    assert rows_digest(table.slice(0, 0)) == rows_digest(table.schema.empty_table())
