"""Event-time windows and a deduplication through the real CLI, with a worker killed, a coordinator
crashed and a rescale: the released windows, the views that pass the deduplication and both late-data
outputs equal a batch job given the run's recorded watermarks, no window or view twice or missing.

The input is ``examples/page-views``: 6000 views over 30 minutes of event time, a little out of order,
one in a hundred minutes late. At 400 rows a step, each step reads about two minutes of event time, so
from step 2 on every step's watermark closes a one-minute window of every page; step 16 is the last,
run with the end-of-input watermark, which closes every window still open.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from ftpipeline.oracle import verify
from ftpipeline.spec import load_pipeline

from ..pipelines import (ROOT, crashed_and_resumed, killed_and_recovered, rescaled_and_resumed, run_cli, run_history,
                         sampled, verified)
from .twins import at_ms, released, views_per_minute, write_steps

EXAMPLE = ROOT / "examples" / "page-views"
LAST = 16  # 15 steps of input, then the end of input


def page_views(directory: Path, name: str, *, kind: str = "tumbling", emit: str = "append",
               strategy: str = "lineage", checkpoint_every: int = 5, workers: int = 2, window_channels: int = 2,
               steps: int | None = None, idle: str | None = None, source_channels: int = 1) -> Path:
    doc = yaml.safe_load((EXAMPLE / "pipeline.yaml").read_text())
    doc["metadata"]["name"] = name
    spec = doc["spec"]
    spec["entryPoint"] = str(EXAMPLE / "pages.py")
    spec["workers"] = workers
    spec["recovery"] = {"strategy": strategy}
    spec["checkpoint"] = {"intervalSteps": checkpoint_every, "storage": {"path": str(directory / "checkpoints")}}
    spec["deadLetter"] = {"path": str(directory / "dead-letters")}
    if steps is not None:
        spec["steps"] = {"maxSteps": steps}
    stages = {s["name"]: s for s in spec["stages"]}
    source, window, sink = stages["views"], stages["per-minute"], stages["minutes"]
    stages["unique"]["deduplicate"]["lateData"] = {"path": str(directory / "late")}
    stages["unique-views"]["sink"]["parquet"]["path"] = str(directory / "unique")
    stages["unique"]["parallelism"] = stages["unique-views"]["parallelism"] = window_channels
    source["parallelism"] = source_channels
    source["source"]["file"].update(path=str(EXAMPLE / "clicks"), rowsPerStep=400)
    if idle is not None:
        source["source"]["eventTime"]["idleTimeout"] = idle
    window["parallelism"] = sink["parallelism"] = window_channels
    w = window["aggregate"]["window"]
    w.update(emit=emit, lateData={"path": str(directory / "late")})
    if kind == "sliding":
        del w["tumbling"]
        w["sliding"] = {"size": "1m", "slide": "20s"}
    sink["sink"]["parquet"]["path"] = str(directory / "out")
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def checked(spark: Any, pipeline: Path, run_dir: Path, steps: int, late_from: tuple[str, ...] = ("per-minute", "unique")
            ) -> None:
    """Every sink, the late-data output and the dead letters against the oracle, in this process's Spark; the
    stages in ``late_from`` found late records."""
    spec = load_pipeline(pipeline)
    results = verify(spark, spec, steps, spec.dead_letter or run_dir, run_history(pipeline))
    for result in results:
        assert result.holds and result.duplicates == 0, result
    late = {r.sink: r.expected_rows for r in results if r.what == "late data"}
    assert late.keys() == set(late_from) and all(late.values())  # the input has late records


KILLS = {"open": 7, "closing": LAST, "before-checkpoint": 3}
MATRIX = [(k, e, s, when) for k in ("tumbling", "sliding") for e in ("append", "update")
          for s in ("lineage", "checkpoint") for when in KILLS]
SAMPLE = [("tumbling", "append", "lineage", "open"), ("sliding", "update", "checkpoint", "closing"),
          ("sliding", "append", "lineage", "before-checkpoint"), ("tumbling", "update", "checkpoint", "open")]


@pytest.mark.parametrize(("kind", "emit", "strategy", "when"), sampled(MATRIX, SAMPLE))
def test_windows_equal_the_oracle_through_a_killed_worker(tmp_path: Path, redis_url: str, spark: Any, kind: str,
                                                          emit: str, strategy: str, when: str) -> None:
    pipeline = page_views(tmp_path, f"w-{kind[:2]}-{emit[:2]}-{strategy[:2]}-{when[:4]}", kind=kind, emit=emit,
                          strategy=strategy)
    run = killed_and_recovered(pipeline, tmp_path / "run", redis_url, KILLS[when], strategy, LAST)
    assert run.summary["late_records"] > 0
    checked(spark, pipeline, tmp_path / "run", LAST)
    if emit == "append":
        twin_agrees(spark, tmp_path, kind)


def twin_agrees(spark: Any, directory: Path, kind: str) -> None:
    """Spark Structured Streaming's twin of the windows (``twins.py``), fed the steps the run read (one source
    channel, 400 rows a step, one micro-batch each). Judging late rows by the watermark it evicts with (the
    newest event time of the batches before less the bound, the run's W(S)), every window SS emitted is the
    run's, with its views, late rows and all, and SS emitted all but the windows its last watermark has not
    passed (SS never ends its input). As SS 3.4+ judges them by default, by the watermark of the batch before
    last, each tumbling window SS emitted holds the run's views and the run's late rows of it whose window ended
    after that older watermark, no other: the difference ``twins.py`` names, and no more."""
    rows = [json.loads(line) for line in (EXAMPLE / "clicks" / "views.jsonl").read_text().splitlines() if line]
    steps = [rows[i:i + 400] for i in range(0, len(rows), 400)]
    source = write_steps(directory / "twin-in", steps)
    slide = 20 if kind == "sliding" else None
    twin = views_per_minute(spark, source, directory / "twin", 10, slide)

    def key(r: dict[str, Any]) -> tuple[str, int]:
        return r["page"], at_ms(r["window_start"])

    got = {key(r): r["views"] for r in released(directory / "out")}
    emitted = {key(r): r["views"] for r in twin}
    assert all(got.get(k) == v for k, v in emitted.items()), \
        sorted((k, v, got.get(k)) for k, v in emitted.items() if got.get(k) != v)[:5]
    pages = len({page for page, _ in got})
    assert len(emitted) >= len(got) - pages * (3 if kind == "sliding" else 1), (len(emitted), len(got))
    if kind != "tumbling":
        return
    newest, marks = 0, [0, 0]  # SS's watermark after each batch (0 before any), from the steps alone
    for step in steps:
        newest = max([newest, *(r["ts"] for r in step)])
        marks.append(newest - 10_000)
    kept: Counter[tuple[str, int]] = Counter()  # late to the run, on time to SS's default: judged a batch earlier
    for r in released(directory / "late" / "per-minute"):
        start = r["ts"] // 60_000 * 60_000
        if start + 60_000 > marks[r["step"] - 1]:  # batch S's late-event watermark: the one after batch S-2
            kept[(r["page"], start)] += 1
    default = {key(r): r["views"] for r in views_per_minute(spark, source, directory / "twin-default", 10, single=False)}
    assert sum(kept.values()) > 0 and all(v == got.get(k, 0) + kept[k] for k, v in default.items()), \
        sorted((k, v, got.get(k), kept[k]) for k, v in default.items() if v != got.get(k, 0) + kept[k])[:5]


def test_a_coordinator_crashed_while_windows_are_open_resumes_from_its_log(tmp_path: Path) -> None:
    pipeline = page_views(tmp_path, "w-crash", kind="sliding", checkpoint_every=3)
    resumed = crashed_and_resumed(pipeline, tmp_path / "run")
    assert resumed.summary["committed"] == LAST


def test_a_windowed_stage_rescaled_from_a_checkpoint_keeps_every_window(tmp_path: Path) -> None:
    pipeline = page_views(tmp_path, "w-rescale", kind="sliding", checkpoint_every=2, steps=8)
    rescaled_and_resumed(pipeline, tmp_path / "run", 1, LAST)  # the windows, the deduplication and their sinks
    newest = max((tmp_path / "checkpoints").rglob("manifest.json"), key=lambda p: json.loads(p.read_text())["epoch"])
    assert sorted(json.loads(newest.read_text())["states"]) == [f"{s}.{i}" for s in ("per-minute", "unique")
                                                                for i in range(3)]


def test_an_idle_source_channel_does_not_hold_the_windows_back(tmp_path: Path, redis_url: str, spark: Any) -> None:
    """Two source channels, one file: one channel never reads a record. Idle after 1 s, it stops holding
    the watermark back, so windows close while the input is read, not only at its end."""
    pipeline = page_views(tmp_path, "w-idle", source_channels=2, idle="1s")
    run = run_cli(pipeline, tmp_path / "run", "--redis-url", redis_url)
    assert run.code == 0, run.output[-4000:]
    steps = run.summary["committed"]
    released = sorted(int(p.name.split("=")[1]) for p in (tmp_path / "out").glob("step=*")
                      if any(p.glob("*.parquet")))
    assert released and released[0] < steps - 1, released  # windows released before the last step
    checked(spark, pipeline, tmp_path / "run", steps)


def test_kafka_views_to_delta_windows_equal_the_oracle_through_a_killed_worker(tmp_path: Path,
                                                                              kafka_bootstrap: str) -> None:
    """``examples/kafka-page-views``: the watermark over two partitions, one commit per step in Delta, the late
    views in a topic (one transaction per step), each once."""
    from confluent_kafka import Producer

    from ftpipeline.kafka.topics import create_topics

    example = ROOT / "examples" / "kafka-page-views"
    doc = yaml.safe_load((example / "pipeline.yaml").read_text())
    doc["metadata"]["name"] = "kviews"
    spec = doc["spec"]
    spec["entryPoint"] = str(example / "pages.py")
    spec["kafka"] = {"bootstrapServers": kafka_bootstrap}
    spec["checkpoint"] = {"intervalSteps": 4, "storage": {"path": str(tmp_path / "checkpoints")}}
    source, window, sink = spec["stages"]
    views, late_views = (f"kviews-{what}-{uuid.uuid4().hex[:6]}" for what in ("views", "late"))  # this run's own
    source["source"]["kafka"].update(topic=views, maxRecordsPerStep=500)  # 13 steps; the stragglers are still late
    window["aggregate"]["window"]["lateData"] = {"topic": late_views}
    sink["sink"]["delta"]["path"] = str(tmp_path / "table")
    create_topics(kafka_bootstrap, {views: 2, late_views: 1})
    # the views in file order, one partition then the other (a producer's own partitioner batches them unevenly,
    # and which views are late depends on how far each partition got): every run reads the same steps
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 20})
    for i, line in enumerate((EXAMPLE / "clicks" / "views.jsonl").read_bytes().splitlines()):
        producer.produce(views, value=line, partition=i % 2)
    assert producer.flush(30) == 0
    pipeline = tmp_path / "kviews.yaml"
    pipeline.write_text(yaml.safe_dump(doc, sort_keys=False))
    run = run_cli(pipeline, tmp_path / "run", "--verify", "--kill-at-step", "5")
    assert run.code == 0, run.output[-4000:]
    verified(run.output, run.summary)
    assert run.summary["recoveries"] and run.summary["watermark"] == 2**63 - 1
    [late] = [v for v in run.summary["verify"] if v["what"] == "late data"]  # type: ignore[union-attr]
    assert late["expected_rows"] == run.summary["late_records"] > 0, late
