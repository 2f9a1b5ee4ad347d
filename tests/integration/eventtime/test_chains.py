"""Event-time operators chained, through the real CLI with a worker killed: what one operator emits because the
watermark advanced (a window fired, a session closed, a timer fired, an outer join's row released) is judged
downstream against the watermark before that advance (``eventtime/order.py``), so nothing Flink counts is lost.

Each run's sinks equal the oracle (the run's own watermarks, the runtime's rules), the batch truth (the same
query as one batch, no watermark: ``oracle/truth.py``) and a count written here in plain Python over the input,
with no record late. The input, written here: page views over 40 minutes of event time by 60 users, never more
than 5 s out of order where the bound is 10 s, at 300 views a step (about a minute and a half of event time).
"""

from __future__ import annotations

import json
import random
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import yaml

from ..pipelines import run_cli, verified
from .twins import (CLICKS, IMPRESSIONS, at_ms, released, window_of_windows, windows_joined, windows_of_a_left_join,
                    windows_of_sessions, windows_of_unique_views, write_steps)

HERE = Path(__file__).parent
START_MS, MINUTE = 1_767_225_600_000, 60_000
VIEWS, PER_STEP = 8_000, 300
GAP = 45_000
LAST = -(-VIEWS // PER_STEP) + 1  # the steps of input, then the end of input


def views(seed: int = 3) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    rows = [{"user": f"u{rng.randrange(60)}", "page": rng.choice(["/", "/a", "/b", "/c"]),
             "ts": START_MS + i * 40 * MINUTE // VIEWS + rng.randrange(-2_500, 2_500)} for i in range(VIEWS)]
    return rows  # each at most 5 s behind the newest before it


def source(directory: Path, name: str, rows: list[dict[str, Any]], per_step: int, schema: dict[str, str],
           bound: str = "10s") -> dict[str, Any]:
    """A source stage reading ``rows`` (written here as JSON Lines), ``per_step`` a step."""
    (directory / name).mkdir()
    (directory / name / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return {"name": name, "source": {
        "file": {"path": str(directory / name), "format": "jsonl", "rowsPerStep": per_step, "schema": schema},
        "eventTime": {"column": "ts", "watermark": {"maxOutOfOrderness": bound}}}}


def pipeline(directory: Path, name: str, stages: list[dict[str, Any]],
             sources: list[dict[str, Any]] | None = None) -> Path:
    """The chain after a source of ``views()`` (or after ``sources``)."""
    if sources is None:
        sources = [source(directory, "views", views(), PER_STEP, {"user": "string", "page": "string", "ts": "long"})]
    doc = {"apiVersion": "ftpipeline.io/v1alpha1", "kind": "FTPipeline", "metadata": {"name": name}, "spec": {
        "entryPoint": str(HERE / "chain_fns.py"), "workers": 2,
        "checkpoint": {"intervalSteps": 5, "storage": {"path": str(directory / "checkpoints")}},
        "deadLetter": {"path": str(directory / "dead-letters")},
        "stages": [*sources, *stages]}}
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def window(name: str, upstream: str, size: str, keys: list[str], column: str | None, late: Path,
           aggregations: list[dict[str, Any]], kind: str = "tumbling") -> dict[str, Any]:
    spec: dict[str, Any] = {kind: {"size": size} if kind == "tumbling" else {"gap": size}, "emit": "append",
                            "lateData": {"path": str(late)}}
    if column is not None:
        spec["timeColumn"] = column
    return {"name": name, "parallelism": 2, "inputs": [{"stage": upstream}],
            "aggregate": {"keyBy": keys, "window": spec, "aggregations": aggregations}}


def stage(name: str, upstream: str, **body: Any) -> dict[str, Any]:
    return {"name": name, "parallelism": 2, "inputs": [{"stage": upstream}], **body}


def sink(name: str, upstream: str, path: Path) -> dict[str, Any]:
    return stage(name, upstream, sink={"parquet": {"path": str(path)}})


def run_through_a_kill(path: Path, directory: Path, redis_url: str, truth: bool = True, last: int = LAST
                       ) -> dict[str, Any]:
    """The run, a worker killed at step 6, verified: equal to the oracle and (``truth``) to the batch truth,
    nothing late."""
    run = run_cli(path, directory / "run", "--redis-url", redis_url, "--kill-at-step", "6", "--seed", "41",
                  "--verify")
    assert run.code == 0, run.output[-4000:]
    assert run.summary["committed"] == last and run.summary["recoveries"], run.output[-3000:]
    verified(run.output, run.summary)
    batch = [v for v in run.summary["verify"] if v["what"] == "batch truth"]  # type: ignore[union-attr]
    assert batch and all(v["equal"] and v["binding"] == truth for v in batch), batch
    assert run.summary["late_records"] == 0, run.output[-3000:]
    return run.summary


def test_a_window_of_windows_holds_every_minute(tmp_path: Path, redis_url: str, spark: Any) -> None:
    """1-minute counts per page -> their minute as a row -> 5-minute sums: every 5-minute window holds all five
    of its minutes (judged against the step's own watermark, the last minute of each was late), and every window
    Spark Structured Streaming's twin of the query finalizes, fed the same steps, is the run's (``twins.py``)."""
    path = pipeline(tmp_path, "chain-ww", [
        window("per-minute", "views", "1m", ["page"], None, tmp_path / "late",
               [{"name": "views", "op": "count"}]),
        stage("renamed", "per-minute", transform={"function": "minutes"}),
        window("per-five", "renamed", "5m", ["page"], "minute", tmp_path / "late",
               [{"name": "views", "op": "sum", "column": "views"}, {"name": "minutes", "op": "count"}]),
        sink("fives", "per-five", tmp_path / "out")])
    run_through_a_kill(path, tmp_path, redis_url)
    counts: Counter[tuple[str, int]] = Counter()
    minutes: defaultdict[tuple[str, int], set[int]] = defaultdict(set)
    for v in views():
        five = v["ts"] // (5 * MINUTE) * 5 * MINUTE
        counts[(v["page"], five)] += 1
        minutes[(v["page"], five)].add(v["ts"] // MINUTE)
    got = {(r["page"], at_ms(r["window_start"])): (r["views"], r["minutes"]) for r in released(tmp_path / "out")}
    assert got == {k: (n, len(minutes[k])) for k, n in counts.items()}
    assert sum(1 for _, m in got.values() if m == 5) >= 28  # every window inside the data holds its five minutes
    rows = views()
    steps = [rows[i:i + PER_STEP] for i in range(0, len(rows), PER_STEP)]
    twin = window_of_windows(spark, write_steps(tmp_path / "twin-in", steps), tmp_path / "twin", 10)
    finalized = {(r["page"], at_ms(r["window_start"])): (r["views"], r["minutes"]) for r in twin}
    assert len(finalized) >= len(got) - 8 and all(got[k] == v for k, v in finalized.items()), \
        sorted((k, v, got.get(k)) for k, v in finalized.items() if got.get(k) != v)[:5]


def test_windows_of_sessions_count_every_session(tmp_path: Path, redis_url: str, spark: Any) -> None:
    """Sessions per user (45 s without a view end one) -> their end as a row -> 10-minute counts of sessions
    per user: each session counted in the window of its end, as sessions cut in one batch are, and as Spark
    Structured Streaming's twin counts every window it finalizes. (By its start, a long session would be late
    downstream by construction: Flink stamps a window's output with its end.)"""
    path = pipeline(tmp_path, "chain-sw", [
        window("visits", "views", "45s", ["user"], None, tmp_path / "late",
               [{"name": "views", "op": "count"}], kind="session"),
        stage("ends", "visits", transform={"function": "session_ends"}),
        window("per-ten", "ends", "10m", ["user"], "ended", tmp_path / "late",
               [{"name": "sessions", "op": "count"}, {"name": "views", "op": "sum", "column": "views"}]),
        sink("tens", "per-ten", tmp_path / "out")])
    run_through_a_kill(path, tmp_path, redis_url)
    by_user: defaultdict[str, list[int]] = defaultdict(list)
    for v in views():
        by_user[v["user"]].append(v["ts"])
    want: Counter[tuple[str, int]] = Counter()
    events: Counter[tuple[str, int]] = Counter()
    for user, times in by_user.items():
        times.sort()
        prev = times[0]
        n = 0
        for t in [*times, None]:
            if t is None or t - prev > GAP:  # sessions that touch are one: a gap longer than 45 s ends one
                ten = (prev + GAP) // (10 * MINUTE) * 10 * MINUTE
                want[(user, ten)] += 1
                events[(user, ten)] += n
                if t is None:
                    break
                n = 0
            prev, n = t, n + 1
    got = {(r["user"], at_ms(r["window_start"])): (r["sessions"], r["views"]) for r in released(tmp_path / "out")}
    assert got == {k: (n, events[k]) for k, n in want.items()}
    rows = views()
    steps = [rows[i:i + PER_STEP] for i in range(0, len(rows), PER_STEP)]
    twin = windows_of_sessions(spark, write_steps(tmp_path / "twin-in", steps), tmp_path / "twin", 10, GAP // 1000)
    finalized = {(r["user"], at_ms(r["window_start"])): (r["sessions"], r["views"]) for r in twin}
    assert len(finalized) >= len(got) // 2 and all(got[k] == v for k, v in finalized.items()), \
        sorted((k, v, got.get(k)) for k, v in finalized.items() if got.get(k) != v)[:5]


def test_windows_of_a_keyed_functions_timers_count_every_firing(tmp_path: Path, redis_url: str) -> None:
    """A keyed function that emits a row per page and minute from an event-time timer at the minute's end ->
    5-minute counts of those rows: each window holds every minute a page was viewed in."""
    path = pipeline(tmp_path, "chain-pw", [
        stage("marks", "views", process={"class": "MinuteMarks", "keys": ["page"],
                                         "output": {"page": "string", "minute": "long"}}),
        window("per-five", "marks", "5m", ["page"], "minute", tmp_path / "late",
               [{"name": "minutes", "op": "count"}]),
        sink("fives", "per-five", tmp_path / "out")])
    run_through_a_kill(path, tmp_path, redis_url, truth=False)  # a keyed function's timers: no batch truth
    want: defaultdict[tuple[str, int], set[int]] = defaultdict(set)
    for v in views():
        want[(v["page"], v["ts"] // (5 * MINUTE) * 5 * MINUTE)].add(v["ts"] // MINUTE)
    got = {(r["page"], at_ms(r["window_start"])): r["minutes"] for r in released(tmp_path / "out")}
    assert got == {k: len(m) for k, m in want.items()}


def test_a_join_of_two_windows_pairs_every_minute(tmp_path: Path, redis_url: str, spark: Any) -> None:
    """Views per page and minute, and distinct users per page and minute (two windows of one source) -> joined on
    the page and the minute's end: every minute of every page is one row with both counts, and every pair Spark
    Structured Streaming's twin finalizes is the run's. (Judged against the step's own watermark, every window's
    row was behind it at the join, which joined nothing.)"""
    path = pipeline(tmp_path, "chain-wj", [
        window("per-minute", "views", "1m", ["page"], None, tmp_path / "late",
               [{"name": "views", "op": "count"}]),
        window("users", "views", "1m", ["page"], None, tmp_path / "late",
               [{"name": "users", "op": "countDistinct", "column": "user"}]),
        {"name": "both", "parallelism": 2, "inputs": [{"stage": "per-minute"}, {"stage": "users"}],
         "join": {"keys": ["page"], "timeColumn": "window_end", "within": {"lower": "0s", "upper": "0s"},
                  "lateData": {"path": str(tmp_path / "late-join")}}},
        sink("minutes", "both", tmp_path / "out")])
    run_through_a_kill(path, tmp_path, redis_url)
    views_of: Counter[tuple[str, int]] = Counter()
    users_of: defaultdict[tuple[str, int], set[str]] = defaultdict(set)
    for v in views():
        minute = v["ts"] // MINUTE * MINUTE
        views_of[(v["page"], minute)] += 1
        users_of[(v["page"], minute)].add(v["user"])
    got = {(r["page"], at_ms(r["left_window_start"])): (r["views"], r["users"]) for r in released(tmp_path / "out")}
    assert got == {k: (n, len(users_of[k])) for k, n in views_of.items()}
    rows = views()
    steps = [rows[i:i + PER_STEP] for i in range(0, len(rows), PER_STEP)]
    twin = windows_joined(spark, write_steps(tmp_path / "twin-in", steps), tmp_path / "twin", 10)
    finalized = {(r["page"], at_ms(r["window_start"])): r["views"] for r in twin}
    assert len(finalized) >= len(got) - 8 and all(got[k][0] == v for k, v in finalized.items()), \
        sorted((k, v, got.get(k)) for k, v in finalized.items() if got.get(k, (None,))[0] != v)[:5]


def impressions_and_clicks(seed: int = 5) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """2,400 impressions of 5 campaigns over 40 minutes, and a click on 40% of them 0 to 14 minutes later (the
    join's interval is 10: some fall outside), each source never more than 5 s out of order."""
    rng = random.Random(seed)
    impressions, clicks = [], []
    for i in range(2_400):
        ts = START_MS + i * 40 * MINUTE // 2_400 + rng.randrange(-2_500, 2_500)
        impressions.append({"id": f"i{i}", "campaign": f"c{rng.randrange(5)}", "ts": ts})
        if rng.random() < 0.4:
            clicks.append({"id": f"i{i}", "ts": ts + rng.randrange(0, 14 * MINUTE)})
    clicks.sort(key=lambda c: c["ts"] + rng.randrange(-2_500, 2_500))
    return impressions, clicks


def test_windows_of_a_left_join_count_every_impression(tmp_path: Path, redis_url: str, spark: Any) -> None:
    """Impressions left-joined with their clicks within 10 minutes -> impressions and clicked ones per campaign
    and minute of the impression: every impression counted once, its click with it when it came in time (judged
    against the step's own watermark, every impression the join released alone was late at the window), and
    every window Spark Structured Streaming's twin finalizes, fed the same steps, is the run's, equal. SS
    finalizes about 10 minutes fewer: the join holds the watermark back by its interval and SS's input never ends
    (``twins.py``)."""
    impressions, clicks = impressions_and_clicks()
    per_click = -(-len(clicks) // (len(impressions) // 100))  # both sources end in the same step
    path = pipeline(tmp_path, "chain-jw", [
        {"name": "joined", "parallelism": 2, "inputs": [{"stage": "impressions"}, {"stage": "clicks"}],
         "join": {"type": "left", "keys": ["id"], "within": {"lower": "0s", "upper": "10m"},
                  "lateData": {"path": str(tmp_path / "late-join")}}},
        stage("marked", "joined", transform={"function": "clicked"}),
        window("per-minute", "marked", "1m", ["campaign"], "left_ts", tmp_path / "late",
               [{"name": "impressions", "op": "count"}, {"name": "clicks", "op": "sum", "column": "clicked"}]),
        sink("rates", "per-minute", tmp_path / "out")], sources=[
        source(tmp_path, "impressions", impressions, 100, {"id": "string", "campaign": "string", "ts": "long"}),
        source(tmp_path, "clicks", clicks, per_click, {"id": "string", "ts": "long"})])
    run_through_a_kill(path, tmp_path, redis_url, last=len(impressions) // 100 + 1)
    click_at = {c["id"]: c["ts"] for c in clicks}
    want: Counter[tuple[str, int]] = Counter()
    clicked: Counter[tuple[str, int]] = Counter()
    for i in impressions:
        key = (i["campaign"], i["ts"] // MINUTE * MINUTE)
        want[key] += 1
        clicked[key] += i["id"] in click_at and i["ts"] <= click_at[i["id"]] <= i["ts"] + 10 * MINUTE
    got = {(r["campaign"], at_ms(r["window_start"])): (r["impressions"], r["clicks"])
           for r in released(tmp_path / "out")}
    assert got == {k: (n, clicked[k]) for k, n in want.items()}
    twin = windows_of_a_left_join(
        spark, write_steps(tmp_path / "twin-impressions", [impressions[i:i + 100] for i in range(0, 2_400, 100)],
                           IMPRESSIONS),
        write_steps(tmp_path / "twin-clicks", [clicks[i:i + per_click] for i in range(0, len(clicks), per_click)],
                    CLICKS), tmp_path / "twin", 10, 10 * 60)
    finalized = {(r["campaign"], at_ms(r["window_start"])): (r["impressions"], r["clicks"]) for r in twin}
    assert len(finalized) >= len(got) * 2 // 3 and all(got[k] == v for k, v in finalized.items()), \
        sorted((k, v, got.get(k)) for k, v in finalized.items() if got.get(k) != v)[:5]


def views_with_repeats(seed: int = 11) -> list[dict[str, Any]]:
    """``views()``' shape with repeats: 6,000 views, 30% of them viewed again 1 to 60 s later, read within 5 s of
    their time, each user's views of a page in event-time order (so SS and the run pass the same one of a batch:
    ``twins.py``)."""
    rng = random.Random(seed)
    arrivals = []
    for i in range(6_000):
        ts = START_MS + i * 40 * MINUTE // 6_000 + rng.randrange(-2_500, 2_500)
        row = {"user": f"u{rng.randrange(60)}", "page": rng.choice(["/", "/a", "/b", "/c"]), "ts": ts}
        arrivals.append((ts + rng.randrange(-2_500, 2_500), row))
        if rng.random() < 0.3:
            again = ts + rng.randrange(1_000, 60_000)
            arrivals.append((again + rng.randrange(-2_500, 2_500), {**row, "ts": again}))
    rows = [r for _, r in sorted(arrivals, key=lambda a: a[0])]
    of_key: defaultdict[tuple[str, str], list[int]] = defaultdict(list)
    for i, r in enumerate(rows):
        of_key[(r["user"], r["page"])].append(i)
    for positions in of_key.values():
        for i, ts in zip(positions, sorted(rows[i]["ts"] for i in positions)):
            rows[i] = {**rows[i], "ts": ts}
    return rows


def unique_per_minute(steps: list[list[dict[str, Any]]], within: int, bound: int, evict_after: bool
                      ) -> Counter[tuple[str, int]]:
    """Views per page and minute of the views a deduplication within ``within`` ms passes, written here from
    Spark's rule (a key stays until the watermark reaches its first view's time plus ``within``; of a key's
    rows in a step the earliest passes) with step k's watermark the newest time of the steps before it less
    ``bound``: the keys the watermark expires leave before the step's rows (``evict_after``: after them, as SS
    does)."""
    expires: dict[tuple[str, str], int] = {}
    counts: Counter[tuple[str, int]] = Counter()
    newest: int | None = None
    watermarks: list[int | None] = []
    for rows in steps:
        watermarks.append(None if newest is None else newest - bound)
        newest = max(r["ts"] for r in rows) if newest is None else max(newest, *(r["ts"] for r in rows))
    for k, rows in enumerate(steps):
        w = (watermarks[k - 1] if k else None) if evict_after else watermarks[k]
        if w is not None:
            expires = {key: at for key, at in expires.items() if at > w}
        first: dict[tuple[str, str], dict[str, Any]] = {}
        for r in rows:
            key = (r["user"], r["page"])
            if key not in expires and (key not in first or r["ts"] < first[key]["ts"]):
                first[key] = r
        for key, r in first.items():
            expires[key] = r["ts"] + within
            counts[(r["page"], r["ts"] // MINUTE * MINUTE)] += 1
    return counts


def test_windows_of_deduplicated_views_equal_the_rule_and_the_twin_one_batch_apart(
        tmp_path: Path, redis_url: str, spark: Any) -> None:
    """A user's repeated views of a page within 30 s dropped -> views per page and minute: what passes depends on
    when the watermark lets a key go (no batch truth, Spark's rule), so the checks are Spark's rule written here
    over the steps and Spark Structured Streaming's twin (``dropDuplicatesWithinWatermark``) fed the same steps.
    The run lets a key go before the step whose watermark passes its horizon reads its rows, as a Flink timer
    would; SS after that batch's rows (``BaseStreamingDeduplicateExec`` evicts when a batch completes), so SS
    keeps each key one batch longer and passes fewer repeats: the run equals the rule, SS equals the rule with
    that one difference on every window it finalizes, and nothing is late."""
    rows = views_with_repeats()
    newest, behind = 0, 0
    for r in rows:
        behind, newest = max(behind, newest - r["ts"]), max(newest, r["ts"])
    assert behind <= 5_000  # within the bound: nothing may be late
    path = pipeline(tmp_path, "chain-dw", [
        stage("unique", "views", deduplicate={"keys": ["user", "page"], "within": "30s",
                                              "lateData": {"path": str(tmp_path / "late-unique")}}),
        window("per-minute", "unique", "1m", ["page"], None, tmp_path / "late", [{"name": "views", "op": "count"}]),
        sink("minutes", "per-minute", tmp_path / "out")], sources=[
        source(tmp_path, "views", rows, PER_STEP, {"user": "string", "page": "string", "ts": "long"}, "30s")])
    run_through_a_kill(path, tmp_path, redis_url, truth=False, last=-(-len(rows) // PER_STEP) + 1)
    steps = [rows[i:i + PER_STEP] for i in range(0, len(rows), PER_STEP)]
    got = {(r["page"], at_ms(r["window_start"])): r["views"] for r in released(tmp_path / "out")}
    assert got == unique_per_minute(steps, 30_000, 30_000, evict_after=False)
    assert sum(got.values()) < len(rows) * 2 // 3  # repeats were dropped
    twin = windows_of_unique_views(spark, write_steps(tmp_path / "twin-in", steps), tmp_path / "twin", 30)
    finalized = {(r["page"], at_ms(r["window_start"])): r["views"] for r in twin}
    ss_rule = unique_per_minute(steps, 30_000, 30_000, evict_after=True)
    assert len(finalized) >= len(got) - 8 and all(ss_rule[k] == v for k, v in finalized.items()), \
        sorted((k, v, ss_rule[k]) for k, v in finalized.items() if ss_rule[k] != v)[:5]
    assert sum(got.values()) > sum(ss_rule.values())  # the difference shows
