"""Run N seeded fault schedules and print a table: schedule, faults, outcome, recovery times, rows lost/duplicated.

    python bench/chaos.py --schedules 100 --seed 0

Schedule k of seed s is always the same topology and faults (``tests/chaos/runner.py``),
so a failing row is rerun alone with ``--only k``. Each schedule runs ``ftpipeline run``
against its own real ZooKeeper and Redis and compares output and dead letters with
the oracle. The JSON of every row goes to ``--json`` for later reading.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.chaos.runner import Schedule, run_schedule  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schedules", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", type=int, nargs="*", help="run these schedule numbers only")
    parser.add_argument("--json", type=Path, default=None, help="write every row here")
    args = parser.parse_args()
    from ftpipeline.worker.executor import build_session

    console = Console()
    numbers = args.only or list(range(1, args.schedules + 1))
    rows = []
    with tempfile.TemporaryDirectory(prefix="ftpipeline-chaos-") as tmp:
        spark = build_session("local[2]", {}, Path(tmp) / "spark", "ftpipeline-chaos-oracle")
        with Progress(console=console) as progress:
            task = progress.add_task("schedules", total=len(numbers))
            for n in numbers:
                schedule = Schedule.draw(n, args.seed)
                directory = Path(tmp) / f"s{n}"
                directory.mkdir()
                outcome = run_schedule(schedule, directory, spark)
                rows.append(outcome.row())
                progress.console.print(outcome.row())
                progress.advance(task)
        spark.stop()
    table = Table(title=f"chaos: {len(rows)} schedules, seed {args.seed}")
    for column in ("schedule", "topology", "faults", "outcome", "recoveries_ms", "outages", "rows_lost",
                   "rows_duplicated", "seconds"):
        table.add_column(column)
    for row in rows:
        table.add_row(*(str(row[c]) for c in ("schedule", "topology", "faults", "outcome", "recoveries_ms", "outages",
                                              "rows_lost", "rows_duplicated", "seconds")))
    console.print(table)
    ok = sum(r["outcome"] == "ok" for r in rows)
    console.print(f"{ok} of {len(rows)} schedules equal to the oracle; rows lost {sum(r['rows_lost'] for r in rows)}, "
                  f"rows duplicated {sum(r['rows_duplicated'] for r in rows)}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0 if ok == len(rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
