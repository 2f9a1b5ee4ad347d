"""Which store holds a running aggregate's state: the candidates side by side, one run.

Each candidate takes the same steps: a partial of ``--touched`` distinct keys
(skewed: a Zipf draw over the key space, so some keys are hot and most of
the tail is cold) folded into a state already holding ``N`` keys, for each
``N`` of ``--sizes``. Printed: the median time of a step's merge (read the
touched keys' rows, merge, write them back) and its ratio to the same
candidate at the smallest size — what a step costs as state grows.

Candidates:

- ``memory``: the Arrow table backend (``state/memory.py``), a join over
  the whole state per step;
- ``rocksdb``: the RocksDB backend (``state/rocks.py``) as shipped
  (LZ4), and ``rocksdb-none`` without compression;
- ``duckdb``: a DuckDB table with the keys as primary key, each step an
  ``INSERT ... ON CONFLICT DO UPDATE ... RETURNING`` of the partial (Arrow
  in, Arrow out); run when the ``duckdb`` package is installed.

The ``memory`` and ``rocksdb`` steps go through ``dataflow.aggregate.merge``,
the code a worker runs.

    python bench/state_backends.py                       # 10k and 1M keys
    python bench/state_backends.py --sizes 10000,1000000,10000000
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from ftpipeline.dataflow import aggregate
from ftpipeline.spec.model import AggregateOp, Aggregation
from ftpipeline.state.backend import STEP, KeyedState, make_backend

OP = AggregateOp(("user",), (Aggregation("n", "count"), Aggregation("total", "sum", "amount")))


def user_keys(ids: np.ndarray) -> pa.Array:
    return pa.array([f"user-{i:010d}" for i in ids.tolist()], pa.string())


def partial(ids: np.ndarray) -> pa.Table:
    return pa.table({"user": user_keys(ids), "n": pa.array(np.ones(len(ids), np.int64)),
                     "total": pa.array(ids.astype(np.int64))})


def touched(rng: np.random.Generator, size: int, count: int) -> np.ndarray:
    """``count`` distinct keys of ``0..size*1.02`` (2 % of each step's keys are new), Zipf-skewed."""
    space = int(size * 1.02)
    count = min(count, space)
    ranks = rng.zipf(1.2, count * 4) % space
    scatter = (ranks * 2654435761) % space  # hot keys spread over the space, not the lowest ids
    ids = np.unique(scatter)
    if len(ids) < count:
        ids = np.unique(np.concatenate([ids, rng.choice(space, count - len(ids), replace=False)]))
    return rng.permutation(ids)[:count]


def initial(size: int, chunk: int = 500_000) -> list[pa.Table]:
    out = []
    for lo in range(0, size, chunk):
        ids = np.arange(lo, min(size, lo + chunk))
        out.append(partial(ids).append_column(STEP, pa.array(np.zeros(len(ids), np.int64))))
    return out


def backend_candidate(kind: str, directory: Path) -> Callable[[list[pa.Table]], Callable[[pa.Table, int], None]]:
    def load(tables: list[pa.Table]) -> Callable[[pa.Table, int], None]:
        if kind == "rocksdb-none":
            from rocksdict import DBCompressionType

            from ftpipeline.state import rocks

            backend = rocks.RocksBackend(directory)
            backend.options.set_compression_type(DBCompressionType.none())
        else:
            backend = make_backend(kind, directory)  # type: ignore[assignment]
        state: KeyedState = backend.create("agg.0", aggregate.state_schema(tables[0], OP), ["user"])
        for table in tables:
            state.put(table)

        def step(part: pa.Table, number: int) -> None:
            aggregate.merge(state, part, OP, number)
        return step
    return load


def duckdb_candidate(directory: Path) -> Callable[[list[pa.Table]], Callable[[pa.Table, int], None]]:
    def load(tables: list[pa.Table]) -> Callable[[pa.Table, int], None]:
        import duckdb

        con = duckdb.connect(str(directory / "state.duckdb"))
        con.execute("SET threads=1")
        con.execute(f"CREATE TABLE state (user VARCHAR PRIMARY KEY, n BIGINT, total BIGINT, {STEP} BIGINT)")
        for table in tables:
            con.register("chunk", table)
            con.execute("INSERT INTO state SELECT * FROM chunk")
            con.unregister("chunk")
        con.execute("CHECKPOINT")

        def step(part: pa.Table, number: int) -> None:
            con.register("part", part)
            con.sql(f"INSERT INTO state SELECT user, n, total, {number} FROM part ON CONFLICT (user) DO UPDATE SET "
                    f"n = n + excluded.n, total = total + excluded.total, {STEP} = excluded.{STEP} "
                    "RETURNING user, n, total").to_arrow_table()
            con.unregister("part")
        return step
    return load


def measure(load: Callable[[list[pa.Table]], Callable[[pa.Table, int], None]], size: int, args: Any) -> float:
    rng = np.random.default_rng(args.seed)
    step = load(initial(size))
    times = []
    for number in range(1, args.warmup + args.steps + 1):
        part = partial(touched(rng, size, args.touched))
        began = time.perf_counter()
        step(part, number)
        if number > args.warmup:
            times.append(time.perf_counter() - began)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="10000,1000000", help="state sizes (keys), comma separated")
    parser.add_argument("--touched", type=int, default=20_000, help="distinct keys per step")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--candidates", default="memory,rocksdb,rocksdb-none,duckdb")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    candidates = args.candidates.split(",")
    try:
        import duckdb  # noqa: F401
    except ImportError:
        if "duckdb" in candidates:
            print("duckdb is not installed: skipping it (pip install duckdb)")
            candidates.remove("duckdb")
    results: dict[tuple[str, int], float] = {}
    for size in sizes:
        for name in candidates:
            if name == "memory" and size > 2_000_000:
                continue  # a join over the whole state per step: minutes at this size
            directory = Path(tempfile.mkdtemp(prefix=f"state-{name}-"))
            try:
                load = duckdb_candidate(directory) if name == "duckdb" else backend_candidate(name, directory)
                results[(name, size)] = measure(load, size, args)
            finally:
                shutil.rmtree(directory, ignore_errors=True)
            print(f"  {name:12s} {size:>11,d} keys: {results[(name, size)] * 1000:8.1f} ms/step", flush=True)
    print(f"\nmedian merge time per step ({args.touched:,d} touched keys), ms; x = ÷ the same candidate at {sizes[0]:,d} keys")
    print(f"{'candidate':12s}" + "".join(f"{s:>22,d}" for s in sizes))
    for name in candidates:
        cells = []
        for size in sizes:
            t = results.get((name, size))
            base = results.get((name, sizes[0]))
            cells.append(f"{'-':>22s}" if t is None or base is None else f"{t * 1000:12.1f} ({t / base:5.2f}x)")
        print(f"{name:12s}" + "".join(f"{c:>22s}" for c in cells))


if __name__ == "__main__":
    main()
