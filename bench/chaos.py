"""Run N seeded fault schedules and print a table: schedule, faults, outcome, recovery times, rows lost/duplicated.

    python bench/chaos.py --schedules 100 --seed 0

Schedule k of seed s is always the same topology and faults (``tests/chaos/runner.py``),
so a failing row is rerun alone with ``--only k``. Each schedule runs ``ftpipeline run``
against its own real ZooKeeper and Redis and compares output and dead letters with
the oracle.

A hundred schedules take hours. With ``--rows FILE`` every row is appended to FILE
(one JSON object a line) as its schedule ends, and the schedules of this seed
already there are not run again: an interrupted run goes on where it stopped, and
the table covers every row in the file.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

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
    parser.add_argument("--rows", type=Path, default=None,
                        help="append every row here as it ends; schedules already in it are not run again")
    parser.add_argument("--keep-failed", type=Path, default=None,
                        help="copy a failing schedule's directory (logs, output, data) here")
    args = parser.parse_args()
    from ftpipeline.worker.session import build_session

    console = Console()
    numbers = args.only or list(range(1, args.schedules + 1))
    rows = [r for r in done_rows(args.rows, args.seed) if r["schedule"] in numbers]
    numbers = [n for n in numbers if n not in {r["schedule"] for r in rows}]
    if rows:
        console.print(f"{len(rows)} schedules already in {args.rows}; running the other {len(numbers)}")
    with tempfile.TemporaryDirectory(prefix="ftpipeline-chaos-") as tmp:
        spark = build_session("local[2]", {}, Path(tmp) / "spark", "ftpipeline-chaos-oracle")
        with Progress(console=console) as progress:
            task = progress.add_task("schedules", total=len(numbers))
            for n in numbers:
                schedule = Schedule.draw(n, args.seed)
                directory = Path(tmp) / f"s{n}"
                directory.mkdir()
                outcome = run_schedule(schedule, directory, spark)
                row = {**outcome.row(), "seed": args.seed}
                rows.append(row)
                progress.console.print(row)
                if args.rows:
                    with args.rows.open("a") as f:
                        f.write(json.dumps(row) + "\n")
                if not outcome.ok and args.keep_failed:
                    shutil.copytree(directory, args.keep_failed / f"seed{args.seed}-s{n}", dirs_exist_ok=True)
                shutil.rmtree(directory, ignore_errors=True)
                progress.advance(task)
        spark.stop()
    rows.sort(key=lambda r: int(r["schedule"]))
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
    return 0 if ok == len(rows) else 1


def done_rows(path: Path | None, seed: int) -> list[dict[str, Any]]:
    if path is None or not path.exists():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in rows if r.get("seed") == seed]


if __name__ == "__main__":
    raise SystemExit(main())
