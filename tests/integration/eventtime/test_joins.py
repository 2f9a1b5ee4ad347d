"""Interval joins through the real CLI, with a worker killed, a coordinator crashed and a rescale: the released
pairs, the unmatched rows of an outer side, the late-data output and the dead letters equal a PySpark batch join
of both inputs given the run's recorded watermarks (``oracle/joins.py``), none twice or missing.

The input, written here: impressions of 40 ads over two hours of event time, and clicks on some of them 0 to 14
minutes after their impression (the join's interval is 0 to 10 minutes, so some fall outside), a few records of
each far behind the newest one (late), a few with no ad (dead letters). Each source reads 60 records a step;
the last step runs with the end-of-input watermark, which lets every row go (an outer join emits the rest).
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
import yaml

from ..pipelines import crashed_and_resumed, killed_and_recovered, rescaled_and_resumed, run_cli, sampled, verified
from .test_windows import checked

MINUTE = 60_000
IMPRESSIONS, PER_STEP = 900, 60
LAST = IMPRESSIONS // PER_STEP + 1  # the steps of input, then the end of input


def inputs(directory: Path, seed: int = 7) -> tuple[Path, Path]:
    rng = random.Random(seed)
    start = 1_767_225_600_000  # 2026-01-01
    impressions, clicks = [], []
    for i in range(IMPRESSIONS):
        ts = start + i * 8_000 + rng.randrange(-40_000, 40_000)
        if i % 97 == 50:
            ts -= 30 * MINUTE  # far behind the newest: late
        ad = None if i % 151 == 3 else f"ad{rng.randrange(40)}"
        impressions.append({"ad": ad, "campaign": f"c{rng.randrange(5)}", "ts": ts})
        if ad is not None and rng.random() < 0.6:
            clicks.append({"ad": ad, "ts": ts + rng.randrange(0, 14 * MINUTE), "cost": rng.randrange(1, 50)})
    clicks.sort(key=lambda c: c["ts"] + rng.randrange(-60_000, 60_000))
    for i in range(0, len(clicks), 89):
        clicks[i] = {**clicks[i], "ts": clicks[i]["ts"] - 40 * MINUTE}  # late
    clicks.insert(100, {"ad": None, "ts": start, "cost": 1})
    paths = []
    for name, rows in (("impressions", impressions), ("clicks", clicks)):
        path = directory / name
        path.mkdir()
        (path / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        paths.append(path)
    return paths[0], paths[1]


def ad_clicks(directory: Path, name: str, *, kind: str = "inner", strategy: str = "lineage",
              checkpoint_every: int = 4, workers: int = 2, channels: int = 2, steps: int | None = None) -> Path:
    impressions, clicks = inputs(directory)
    (directory / "entry.py").write_text('"""No functions: the pipeline is declared whole."""\n')
    per_step = -(-PER_STEP * len((clicks / "clicks.jsonl").read_text().splitlines()) // IMPRESSIONS)  # ends with them

    def source(path: Path, rows: int, schema: dict[str, str]) -> dict[str, Any]:
        return {"file": {"path": str(path), "format": "jsonl", "rowsPerStep": rows, "schema": schema},
                "eventTime": {"column": "ts", "watermark": {"maxOutOfOrderness": "2m"}}}

    doc = {"apiVersion": "ftpipeline.io/v1alpha1", "kind": "FTPipeline", "metadata": {"name": name}, "spec": {
        "entryPoint": str(directory / "entry.py"), "workers": workers, "recovery": {"strategy": strategy},
        "checkpoint": {"intervalSteps": checkpoint_every, "storage": {"path": str(directory / "checkpoints")}},
        "deadLetter": {"path": str(directory / "dead-letters")},
        **({"steps": {"maxSteps": steps}} if steps else {}),
        "stages": [
            {"name": "impressions", "source": source(impressions, PER_STEP, {"ad": "string", "campaign": "string",
                                                                             "ts": "long"})},
            {"name": "clicks", "source": source(clicks, per_step, {"ad": "string", "ts": "long", "cost": "long"})},
            {"name": "clicked", "parallelism": channels, "inputs": [{"stage": "impressions"}, {"stage": "clicks"}],
             "join": {"type": kind, "keys": ["ad"], "within": {"lower": "0s", "upper": "10m"},
                      "lateData": {"path": str(directory / "late")}}},
            {"name": "out", "parallelism": channels, "inputs": [{"stage": "clicked"}],
             "sink": {"parquet": {"path": str(directory / "out")}}},
        ]}}
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


KILLS = {"buffering": 6, "ending": LAST, "before-checkpoint": 2}
AFTER_TASKS = {"ending": 2}  # both sources' tasks: the join's channels are still waiting for them
MATRIX = [(k, s, when) for k in ("inner", "left", "right", "full") for s in ("lineage", "checkpoint") for when in KILLS]
SAMPLE = [("left", "lineage", "buffering"), ("full", "checkpoint", "ending"),
          ("inner", "lineage", "before-checkpoint"), ("right", "checkpoint", "buffering")]


@pytest.mark.parametrize(("kind", "strategy", "when"), sampled(MATRIX, SAMPLE))
def test_a_join_equals_the_oracle_through_a_killed_worker(tmp_path: Path, redis_url: str, spark: Any, kind: str,
                                                          strategy: str, when: str) -> None:
    pipeline = ad_clicks(tmp_path, f"j-{kind[:2]}-{strategy[:2]}-{when[:4]}", kind=kind, strategy=strategy)
    killed_and_recovered(pipeline, tmp_path / "run", redis_url, KILLS[when], strategy, LAST, AFTER_TASKS.get(when, 3))
    checked(spark, pipeline, tmp_path / "run", LAST, ("clicked",))


def test_a_coordinator_crashed_while_rows_are_buffered_resumes_from_its_log(tmp_path: Path) -> None:
    pipeline = ad_clicks(tmp_path, "j-crash", kind="full", checkpoint_every=3)
    resumed = crashed_and_resumed(pipeline, tmp_path / "run")
    assert resumed.summary["committed"] == LAST


def test_a_join_rescaled_from_a_checkpoint_keeps_every_buffered_row(tmp_path: Path) -> None:
    pipeline = ad_clicks(tmp_path, "j-rescale", kind="left", checkpoint_every=2, steps=8)
    rescaled_and_resumed(pipeline, tmp_path / "run", 2, LAST)


def test_the_ad_clicks_example_equals_the_oracle_through_a_killed_worker(tmp_path: Path) -> None:
    """The README's example as a user runs it (a private Kafka broker, both topics produced first), a worker
    killed while its impressions and clicks are buffered: the join and the windows after it are both rebuilt."""
    import json as _json

    example = Path(__file__).resolve().parents[3] / "examples" / "ad-clicks"
    doc = yaml.safe_load((example / "pipeline.yaml").read_text())
    doc["spec"]["entryPoint"] = str(example / "ctr.py")
    doc["spec"]["deadLetter"] = {"path": str(tmp_path / "dead-letters")}
    doc["spec"]["checkpoint"] = {"storage": {"path": str(tmp_path / "checkpoints")}}
    doc["spec"]["stages"][-1]["sink"]["delta"]["path"] = str(tmp_path / "ctr")
    pipeline = tmp_path / "ad-clicks.yaml"
    pipeline.write_text(yaml.safe_dump(doc, sort_keys=False))
    run = run_cli(pipeline, tmp_path / "run", "--produce", f"impressions={example / 'impressions.jsonl.gz'}",
                  "--produce", f"clicks={example / 'clicks.jsonl.gz'}", "--verify", "--kill-at-step", "8", private=True)
    assert run.code == 0, run.output[-4000:]
    verified(run.output, run.summary)
    [recovery] = run.summary["recoveries"]
    assert {"clicked.1", "per-minute.1"} <= set(recovery["rebuilt"]) or recovery["strategy"] != "lineage", \
        _json.dumps(recovery)
    # the input is within its bounds: no impression is late downstream of the join (whichever partitions the
    # records landed in), and the table is the same query as one batch over both topics
    assert run.summary["late_records"] == 0, run.output[-3000:]
    [truth] = [v for v in run.summary["verify"] if v["what"] == "batch truth"]  # type: ignore[union-attr]
    assert truth["equal"] and truth["binding"] and truth["expected_rows"] > 0, truth
