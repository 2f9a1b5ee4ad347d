"""A keyed function with state and timers through the real CLI (``fraud_rule.py``), with a worker killed, a
coordinator crashed and a rescale: its output and dead letters equal the same class run over each card's
payments in step order with the run's recorded watermarks and processing times (``oracle/process.py``).

The input, written here: payments of 12 cards over six hours of event time, each card busy in some 10-minute
slots and idle in others, most of its payments declined (three within 5 minutes, then an idle slot: an alert), a
few with no card (dead letters). 60 payments a step; the last step runs with the end-of-input watermark, which
fires every event-time timer left. The rule starts from a Delta table of declines before the run
(``process.initialState``): two cards' counts toward a burst, and a card the stream never has with a burst of
its own, whose alert only the initial state can raise.
"""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import yaml

from ..pipelines import crashed_and_resumed, killed_and_recovered, rescaled_and_resumed, run_cli, sampled, verified
from . import twins
from .test_windows import checked

HERE = Path(__file__).parent
OUTPUT = {"card": "string", "kind": "string", "at": "long", "merchants": "long", "id": "long"}
PER_STEP = 60


def _rows(seed: int = 11) -> list[dict[str, Any]]:
    """Six hours in 10-minute slots: in each, about half of 12 cards pay 2 to 11 times, with many
    declines; a card idle in the next slot leaves a quiet 10 minutes."""
    rng = random.Random(seed)
    start, rows = 1_767_225_600_000, []
    for slot in range(36):
        for card in range(12):
            if rng.random() < 0.45:
                for _ in range(rng.randrange(2, 12)):
                    rows.append({"card": f"card{card}", "merchant": f"m{rng.randrange(6)}",
                                 "declined": rng.random() < 0.6, "ts": start + slot * 600_000 + rng.randrange(600_000)})
    rows.sort(key=lambda r: r["ts"] + rng.randrange(-30_000, 30_000))  # a little out of order
    for i in range(7, len(rows), 131):
        rows[i] = {**rows[i], "card": None}  # dead letters
    return rows


ROWS = _rows()
LAST = -(-len(ROWS) // PER_STEP) + 1  # the steps of input, then the end of input


def declines_before(directory: Path) -> Path:
    """The initial state: a Delta table of declines in the minutes before the first payment."""
    from deltalake import write_deltalake

    start = 1_767_225_600_000
    rows = [("card3", -120), ("card3", -60), ("card5", -30), ("card99", -240), ("card99", -200), ("card99", -180)]
    path = directory / "declines-before"
    write_deltalake(str(path), pa.table({"card": [c for c, _ in rows], "ts": [start + s * 1000 for _, s in rows]}))
    return path


def payments(directory: Path) -> Path:
    path = directory / "payments"
    path.mkdir()
    (path / "payments.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    return path


def fraud(directory: Path, name: str, *, strategy: str = "lineage", checkpoint_every: int = 4, workers: int = 2,
          channels: int = 2, steps: int | None = None) -> Path:
    doc = {"apiVersion": "ftpipeline.io/v1alpha1", "kind": "FTPipeline", "metadata": {"name": name}, "spec": {
        "entryPoint": str(HERE / "fraud_rule.py"), "workers": workers, "recovery": {"strategy": strategy},
        "checkpoint": {"intervalSteps": checkpoint_every, "storage": {"path": str(directory / "checkpoints")}},
        "deadLetter": {"path": str(directory / "dead-letters")},
        "steps": {"trigger": {"timerMs": 150}, **({"maxSteps": steps} if steps else {})},
        "stages": [
            {"name": "payments", "source": {
                "file": {"path": str(payments(directory)), "format": "jsonl", "rowsPerStep": PER_STEP,
                         "schema": {"card": "string", "merchant": "string", "declined": "boolean", "ts": "long"}},
                "eventTime": {"column": "ts", "watermark": {"maxOutOfOrderness": "1m"}}}},
            {"name": "rule", "parallelism": channels, "inputs": [{"stage": "payments"}],
             "process": {"class": "FraudRule", "keys": ["card"], "output": OUTPUT,
                         "initialState": {"delta": {"path": str(declines_before(directory))}}}},
            {"name": "alerts", "parallelism": channels, "inputs": [{"stage": "rule"}],
             "sink": {"parquet": {"path": str(directory / "out")}}},
        ]}}
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


KILLS = {"mid": 7, "last-input": LAST - 1, "before-checkpoint": 2}  # (at the end-of-input step itself, the
# victim's tasks can all be done before the kill: nothing to recover)
MATRIX = [(s, when) for s in ("lineage", "checkpoint") for when in KILLS]
SAMPLE = [("lineage", "mid"), ("checkpoint", "last-input"), ("lineage", "before-checkpoint")]


@pytest.mark.parametrize(("strategy", "when"), sampled(MATRIX, SAMPLE))
def test_a_keyed_function_equals_the_oracle_through_a_killed_worker(tmp_path: Path, redis_url: str, spark: Any,
                                                                    strategy: str, when: str) -> None:
    pipeline = fraud(tmp_path, f"p-{strategy[:2]}-{when[:3]}", strategy=strategy)
    killed_and_recovered(pipeline, tmp_path / "run", redis_url, KILLS[when], strategy, LAST, after_tasks=1)
    checked(spark, pipeline, tmp_path / "run", LAST, ())
    out = spark.read.parquet(str(tmp_path / "out")).groupBy("kind").count().toArrow().to_pylist()
    counts = {r["kind"]: r["count"] for r in out}
    assert counts.get("alert", 0) > 3 and counts.get("first-seen", 0) > 6, counts
    seeded = spark.read.parquet(str(tmp_path / "out")).where("card = 'card99'").toArrow().to_pylist()
    assert [r["kind"] for r in seeded] == ["alert"], seeded  # raised by the initial state alone


def test_a_coordinator_crashed_with_timers_pending_resumes_from_its_log(tmp_path: Path) -> None:
    pipeline = fraud(tmp_path, "p-crash", checkpoint_every=3)
    resumed = crashed_and_resumed(pipeline, tmp_path / "run")
    assert resumed.summary["committed"] == LAST


def test_a_keyed_function_rescaled_from_a_checkpoint_keeps_every_cards_state(tmp_path: Path) -> None:
    pipeline = fraud(tmp_path, "p-rescale", checkpoint_every=2, steps=8)
    rescaled_and_resumed(pipeline, tmp_path / "run", 1, LAST)


EXAMPLE = HERE.parents[2] / "examples" / "fraud-alerts"


def example_doc(directory: Path) -> dict[str, Any]:
    """``examples/fraud-alerts``' pipeline, its code, dead letters and checkpoints where a test runs it."""
    doc: dict[str, Any] = yaml.safe_load((EXAMPLE / "pipeline.yaml").read_text())
    doc["spec"]["entryPoint"] = str(EXAMPLE / "fraud.py")
    doc["spec"]["deadLetter"] = {"path": str(directory / "dead-letters")}
    doc["spec"]["checkpoint"] = {"storage": {"path": str(directory / "checkpoints")}}
    return doc


def test_the_fraud_alerts_example_equals_the_oracle_through_a_killed_worker(tmp_path: Path) -> None:
    """The README's example as a user runs it: a private Kafka broker, the demo's payments produced first."""
    pipeline = tmp_path / "fraud-alerts.yaml"
    pipeline.write_text(yaml.safe_dump(example_doc(tmp_path), sort_keys=False))
    run = run_cli(pipeline, tmp_path / "run", "--produce", f"payments={EXAMPLE / 'payments.jsonl.gz'}", "--verify",
                  "--kill-at-step", "8", private=True)
    assert run.code == 0, run.output[-4000:]
    verified(run.output, run.summary)
    assert run.summary["recoveries"] and "alerts: output equals the oracle: 240 rows" in run.output, run.output[-2000:]
    assert "not deterministic" not in run.output  # its re-runs emitted what it first did (lineage/determinism.py)


def quiet_bursts(payments: list[dict[str, Any]]) -> set[tuple[str, int, int, int]]:
    """The fraud example's alerts counted from its docstring, over all the input at once: per card, each decline
    ending three or more within 5 minutes, with no payment in the 10 minutes after it (card, declines, first
    decline, last decline)."""
    minute, alerts = 60_000, set()
    cards: dict[str, list[dict[str, Any]]] = {}
    for p in payments:
        cards.setdefault(p["card"], []).append(p)
    for card, rows in cards.items():
        declines = [r["ts_ms"] for r in rows if r["declined"]]
        for last in set(declines):
            burst = [t for t in declines if last - 5 * minute < t <= last]
            if len(burst) >= 3 and not any(last < r["ts_ms"] <= last + 10 * minute for r in rows):
                alerts.add((card, len(burst), min(burst), last))
    return alerts


def test_the_fraud_alerts_example_equals_a_plain_count_and_its_spark_twin(tmp_path: Path, redis_url: str,
                                                                          spark: Any) -> None:
    """The example's rule and bounds over its payments, read from a file 2,000 a step (as its topic is) into a
    Parquet sink, a worker killed at step 8: its alerts equal a count written from the rule's docstring over all
    the input at once, and ``transformWithStateInPandas``' (``twins.fraud_alerts``) on every alert SS emitted."""
    lines = gzip.decompress((EXAMPLE / "payments.jsonl.gz").read_bytes()).decode().splitlines(keepends=True)
    (tmp_path / "payments").mkdir()
    (tmp_path / "payments" / "payments.jsonl").write_text("".join(lines))
    valid = [r for r in map(json.loads, lines) if isinstance(r.get("declined"), bool) and "ts_ms" in r]
    doc = example_doc(tmp_path)
    spec = doc["spec"]
    spec.pop("kafka")
    payments, _, alerts = spec["stages"]
    payments["source"]["file"] = {"path": str(tmp_path / "payments"), "format": "jsonl", "rowsPerStep": 2000,
                                  "schema": payments["source"].pop("kafka")["schema"]}
    alerts["sink"] = {"parquet": {"path": str(tmp_path / "alerts")}}
    pipeline = tmp_path / "fraud-alerts-files.yaml"
    pipeline.write_text(yaml.safe_dump(doc, sort_keys=False))
    run = run_cli(pipeline, tmp_path / "run", "--kill-at-step", "8")
    assert run.code == 0 and run.summary["recoveries"], run.output[-4000:]
    fields = ("card", "declines", "first_decline_ms", "quiet_since_ms")
    got = [tuple(r[f] for f in fields) for r in twins.released(tmp_path / "alerts")]
    truth = quiet_bursts(valid)
    assert len(got) == len(set(got)) and set(got) == truth and len(truth) > 200, (len(got), len(truth))

    steps = [valid[i:i + 2000] for i in range(0, len(valid), 2000)]
    source = twins.write_steps(tmp_path / "twin-steps", steps, twins.PAYMENTS)
    twin = {tuple(r[f] for f in fields) for r in twins.fraud_alerts(spark, source, tmp_path / "twin", 60)}
    # SS's input never ends: an alert whose quiet 10 minutes its last watermark has not passed is not emitted
    last_watermark = max(r["ts_ms"] for r in valid) - 60_000
    assert twin <= truth and all(a[3] + 600_000 > last_watermark for a in truth - twin), sorted(truth - twin)
    assert len(twin) >= len(truth) - 3, (len(twin), len(truth))


NOISY = '''"""A keyed function that breaks the contract: it draws from random, not ctx.rng."""
import random


class Noisy:
    def init_state(self, key, rows, ctx):
        pass

    def process(self, key, rows, ctx):
        return [{"card": key[0], "kind": "noise", "at": random.randrange(10**9), "merchants": 0, "id": 0}]
'''


def test_a_function_drawing_outside_ctx_is_told_when_a_recovery_runs_it_again(tmp_path: Path) -> None:
    """A worker exits right after recording a keyed function's task, its outputs held there alone: the re-run
    elsewhere emits other rows (lineage/determinism.py), and the run says so, naming the stage, and goes on."""
    (tmp_path / "noisy.py").write_text(NOISY)
    pipeline = fraud(tmp_path, "p-noisy", checkpoint_every=50)
    doc = yaml.safe_load(pipeline.read_text())
    doc["spec"]["entryPoint"] = str(tmp_path / "noisy.py")
    doc["spec"]["stages"][1]["process"]["class"] = "Noisy"
    # its rows are objects the sink takes over a hash edge, not a chained task's
    doc["spec"]["stages"][2]["inputs"] = [{"stage": "rule", "partition": "hash", "keys": ["card"]}]
    pipeline.write_text(yaml.safe_dump(doc, sort_keys=False))
    run = run_cli(pipeline, tmp_path / "run", env={"FTPIPELINE_CRASH_AFTER": "process-done:3@w1"})
    assert run.code == 0, run.output[-3000:]
    assert run.summary["recoveries"] and "stage rule's function is not deterministic" in run.output, run.output[-3000:]
