"""Inputs that hold the watermark, through the real CLI: a source channel with nothing to read does not hold it
back (and the run says so), and two files of the same hours are read one per channel, each in its own time
order, so a keyed function's timers fire as the watermark passes them and its alerts equal a count written
here in plain Python (read one after the other by one channel, six hours then the same six hours again, the
second file's timers fired only at the end of the input and its rows were not late: 308 alerts instead of 354).
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import yaml

from ..pipelines import run_cli, verified

HERE = Path(__file__).parent
START_MS, MINUTE = 1_767_225_600_000, 60_000


def logins(users: range, seed: int) -> list[dict[str, Any]]:
    """Six hours of logins of ``users``, in time order: bursts of failures, some followed by a quiet time."""
    rng = random.Random(seed)
    rows = []
    for slot in range(36):  # ten-minute slots
        for user in users:
            if rng.random() < 0.4:
                for _ in range(rng.randrange(2, 7)):
                    rows.append({"user": f"u{user}", "ok": rng.random() < 0.3,
                                 "ts": START_MS + slot * 10 * MINUTE + rng.randrange(10 * MINUTE)})
    return sorted(rows, key=lambda r: r["ts"])


def alerts_of(rows: list[dict[str, Any]]) -> set[tuple[str, int]]:
    """The rule over each user's logins in time order: three failures within 5 minutes, then 10 minutes with no
    login, is an alert at the last failure plus 10 minutes."""
    out = set()
    by_user: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_user.setdefault(r["user"], []).append(r)
    for user, mine in by_user.items():
        mine.sort(key=lambda r: (r["ts"], r["ok"]))
        failed: list[int] = []
        due = None
        for r in mine:
            if due is not None and r["ts"] > due:
                out.add((user, due))
                failed = []
            due = None
            if not r["ok"]:
                failed = [t for t in failed if t > r["ts"] - 5 * MINUTE] + [r["ts"]]
                if len(failed) >= 3:
                    due = r["ts"] + 10 * MINUTE
        if due is not None:
            out.add((user, due))
    return out


def pipeline(directory: Path, name: str, files: dict[str, list[dict[str, Any]]], stages: list[dict[str, Any]],
             channels: int = 2) -> Path:
    (directory / "in").mkdir()
    for file, rows in files.items():
        (directory / "in" / file).write_text("".join(json.dumps(r) + "\n" for r in rows))
    doc = {"apiVersion": "ftpipeline.io/v1alpha1", "kind": "FTPipeline", "metadata": {"name": name}, "spec": {
        "entryPoint": str(HERE / "chain_fns.py"), "workers": 2,
        "checkpoint": {"intervalSteps": 5, "storage": {"path": str(directory / "checkpoints")}},
        "deadLetter": {"path": str(directory / "dead-letters")},
        "stages": [{"name": "logins", "parallelism": channels, "source": {
            "file": {"path": str(directory / "in"), "format": "jsonl", "rowsPerStep": 200,
                     "schema": {"user": "string", "ok": "boolean", "ts": "long"}},
            "eventTime": {"column": "ts", "watermark": {"maxOutOfOrderness": "30s"}}}}, *stages]}}
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def test_two_files_of_the_same_hours_feed_a_keyed_function_whose_alerts_equal_a_plain_count(
        tmp_path: Path, redis_url: str) -> None:
    east, west = logins(range(0, 20), 1), logins(range(20, 40), 2)
    # names a hash of the name put in one channel (crc32 % 2 is 0 for both): dealt in name order, one each
    path = pipeline(tmp_path, "logins", {"asia.jsonl": east, "us.jsonl": west}, [
        {"name": "rule", "parallelism": 2, "inputs": [{"stage": "logins"}],
         "process": {"class": "LoginAlerts", "keys": ["user"], "output": {"user": "string", "at": "long"}}},
        {"name": "alerts", "parallelism": 2, "inputs": [{"stage": "rule"}],
         "sink": {"parquet": {"path": str(tmp_path / "out")}}}])
    run = run_cli(path, tmp_path / "run", "--redis-url", redis_url, "--kill-at-step", "9", "--verify")
    assert run.code == 0, run.output[-4000:]
    verified(run.output, run.summary)
    assert "went-back" not in run.output and "held-back" not in run.output, run.output[-3000:]
    got = {(r["user"], r["at"]) for r in ds.dataset(str(tmp_path / "out"), format="parquet",
                                                     partitioning="hive").to_table().to_pylist()}
    want = alerts_of(east + west)
    assert len(want) > 40 and got == want, (len(got), len(want), sorted(got ^ want)[:5])
    # and released as time passed, not all at the end: the watermark moved with both channels
    steps = sorted(int(p.name.split("=")[1]) for p in (tmp_path / "out").glob("step=*") if any(p.glob("*.parquet")))
    assert steps[0] < run.summary["committed"] // 2, steps


def test_a_source_channel_with_no_input_does_not_hold_the_watermark_and_the_run_says_so(
        tmp_path: Path, redis_url: str) -> None:
    """Three channels, two files: the third reads nothing. With no idleTimeout, it held the watermark at none
    until the end of the input; now it has nothing to read, holds nothing back, and a warning names it."""
    path = pipeline(tmp_path, "empty", {"east.jsonl": logins(range(0, 20), 1), "west.jsonl": logins(range(20, 40), 2)}, [
        {"name": "per-ten", "parallelism": 2, "inputs": [{"stage": "logins"}], "aggregate": {
            "keyBy": ["user"], "window": {"tumbling": {"size": "10m"}},
            "aggregations": [{"name": "logins", "op": "count"}]}},
        {"name": "counts", "parallelism": 2, "inputs": [{"stage": "per-ten"}],
         "sink": {"parquet": {"path": str(tmp_path / "out")}}}], channels=3)
    run = run_cli(path, tmp_path / "run", "--redis-url", redis_url, "--verify")
    assert run.code == 0, run.output[-4000:]
    verified(run.output, run.summary)
    assert "source channel logins.2 has nothing to read" in run.output, run.output[-3000:]
    steps = sorted(int(p.name.split("=")[1]) for p in (tmp_path / "out").glob("step=*") if any(p.glob("*.parquet")))
    assert steps and steps[0] < run.summary["committed"] // 2, steps  # windows closed while the input was read
