"""The generator source: rows depend only on (seed, channel, offset range), never on the reader."""

from __future__ import annotations

from types import ModuleType

import numpy as np
import pyarrow as pa
import pytest

from ftpipeline.dataflow.sources.generator import GeneratorContext, GeneratorReader
from ftpipeline.spec.model import GeneratorSource


def module(**functions) -> ModuleType:
    m = ModuleType("entry")
    for name, fn in functions.items():
        setattr(m, name, fn)
    return m


def random_rows(ctx: GeneratorContext) -> pa.Table:
    return pa.table({
        "id": np.arange(ctx.offset, ctx.offset + ctx.rows, dtype=np.int64),
        "x": ctx.rng.random(ctx.rows),
        "channel": np.full(ctx.rows, ctx.channel),
    })


def reader(fn=random_rows, seed: int = 7, name: str = "gen") -> GeneratorReader:
    return GeneratorReader(GeneratorSource(name, rows_per_step=100, seed=seed), module(**{name: fn}))


def test_same_range_gives_identical_rows_across_readers() -> None:
    a = reader().read(channel=1, step=3, lo=200, hi=250).table
    b = reader().read(channel=1, step=3, lo=200, hi=250).table
    assert a.num_rows == 50
    assert a.equals(b)


def test_rows_do_not_depend_on_the_step_number() -> None:
    """A replay may record the range under another step; the rows follow the range."""
    a = reader().read(channel=0, step=1, lo=0, hi=20).table
    b = reader().read(channel=0, step=9, lo=0, hi=20).table
    assert a.equals(b)


def test_different_offsets_differ() -> None:
    g = reader()
    a = g.read(channel=0, step=1, lo=0, hi=20).table
    b = g.read(channel=0, step=2, lo=20, hi=40).table
    assert a.column("x").to_pylist() != b.column("x").to_pylist()
    assert b.column("id").to_pylist() == list(range(20, 40))


def test_different_channels_and_seeds_differ() -> None:
    base = reader().read(channel=0, step=1, lo=0, hi=20).table.column("x").to_pylist()
    other_channel = reader().read(channel=1, step=1, lo=0, hi=20).table.column("x").to_pylist()
    other_seed = reader(seed=8).read(channel=0, step=1, lo=0, hi=20).table.column("x").to_pylist()
    assert base != other_channel
    assert base != other_seed


def test_context_fields() -> None:
    seen: list[GeneratorContext] = []

    def capture(ctx: GeneratorContext) -> pa.Table:
        seen.append(ctx)
        return pa.table({"a": [1]})

    reader(capture, seed=11).read(channel=2, step=5, lo=40, hi=70)
    (ctx,) = seen
    assert (ctx.step, ctx.channel, ctx.offset, ctx.rows, ctx.seed) == (5, 2, 40, 30, 11)
    assert isinstance(ctx.rng, np.random.Generator)


def test_a_dict_is_accepted() -> None:
    batch = reader(lambda ctx: {"a": [1, 2], "b": ["x", "y"]}).read(0, 1, 0, 2)
    assert batch.table.equals(pa.table({"a": [1, 2], "b": ["x", "y"]}))
    assert batch.dead_letters == []


def test_a_record_batch_is_accepted() -> None:
    rb = pa.RecordBatch.from_pydict({"a": [1, 2, 3]})
    table = reader(lambda ctx: rb).read(0, 1, 0, 3).table
    assert isinstance(table, pa.Table)
    assert table.equals(pa.Table.from_batches([rb]))


@pytest.mark.parametrize("bad", [None, [1, 2], "rows", pa.array([1, 2])], ids=["None", "list", "str", "Array"])
def test_anything_else_raises_type_error_naming_the_function(bad) -> None:
    with pytest.raises(TypeError, match=r"generator 'make_clicks' returned .*expected a pyarrow\.Table"):
        reader(lambda ctx: bad, name="make_clicks").read(0, 1, 0, 2)


def test_reading_without_the_module_raises() -> None:
    g = GeneratorReader(GeneratorSource("gen", 10), None)
    with pytest.raises(RuntimeError, match="entry point"):
        g.read(0, 1, 0, 5)


def test_unbounded_and_never_exhausted() -> None:
    g = reader()
    assert g.available(0, 0) is None
    assert g.available(3, 10**9) is None
    assert g.exhausted(0, 0) is False
    assert g.exhausted(3, 10**9) is False
