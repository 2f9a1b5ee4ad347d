"""Random chains of event-time operators against the reference interpreter, for as many seeds as asked.

    python bench/eventtime_reference.py --seeds 2000 --first 0

The unit tier runs seeds 0..199 (``tests/unit/eventtime/test_reference.py``); this runs more and prints, per
kind of operator in a chain, how many chains it was in and how many of those differed, then each differing
seed (rerun one with ``--first SEED --seeds 1``). Each seed's chain, input and disorder are a function of the
seed alone (``tests/unit/eventtime/chains.py``).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.unit.eventtime.chains import canonical, chain, reference, runtime  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=2000)
    parser.add_argument("--first", type=int, default=0)
    args = parser.parse_args()
    console = Console()
    chains: Counter[str] = Counter()
    differing: Counter[str] = Counter()
    failed: list[tuple[int, str]] = []
    late = 0
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp, Progress(console=console) as progress:
        task = progress.add_task("chains", total=args.seeds)
        for seed in range(args.first, args.first + args.seeds):
            join, ops, steps = chain(seed)
            kinds = {op.kind for op in ops} | ({f"join ({join.kind})"} if join is not None else set())
            if join is not None and (join.left or join.right):
                kinds |= {"a window -> join"} | {op.kind for op in (*join.left, *join.right)}
            want = reference(join, ops, steps)
            got, _ = runtime(join, ops, steps, Path(tmp) / str(seed))
            chains.update(kinds)
            late += bool(want.late)
            if canonical(got) != canonical(want):
                differing.update(kinds)
                failed.append((seed, " -> ".join([*(["join"] if join else []), *(op.kind for op in ops)])))
            progress.advance(task)
    table = Table(title=f"{args.seeds} random chains (seeds {args.first}..{args.first + args.seeds - 1}), "
                        f"{time.perf_counter() - started:.0f} s; {late} with late records")
    table.add_column("operator in the chain")
    table.add_column("chains", justify="right")
    table.add_column("differing from the reference", justify="right")
    for kind, n in sorted(chains.items()):
        table.add_row(kind, str(n), str(differing[kind]))
    console.print(table)
    for seed, shape in failed:
        console.print(f"[red]seed {seed} differs[/red]: {shape}")
    console.print(f"{len(failed)} of {args.seeds} chains differ")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
