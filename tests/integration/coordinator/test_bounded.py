"""A long run with default settings stays flat: what the runtime keeps does not grow with the run.

Checkpoints are on by default (``spec/schema.py``: DEFAULT_CHECKPOINT_STEPS), and each commit lets
go of what it covers: a stateful stage's inputs leave the workers' buffers (garbage collection), the
lineage tables and the step log are trimmed, the command log is compacted. So over 500 steps the
workers' buffer bytes, the pipeline's Redis entries and its znodes in ZooKeeper rise and fall with
the checkpoint interval, and the second half of the run holds no more than the first.

Sampled from outside while ``ftpipeline run`` runs, against the real Redis and ZooKeeper it uses.
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path

import redis
from kazoo.client import KazooClient

from ftpipeline.commandlog.zklog import base_path

from ..pipelines import CliRun, clickstream, identity_of, run_cli

STEPS = 500
EARLY, LATE = (150, 300), (350, STEPS + 1)  # committed steps of the two windows compared
GROWTH = 1.25  # what the late window's peak may exceed the early one's by (a sawtooth's teeth vary)
FILES_EVERY_S = 0.05  # how often the workers' files are sampled


def _bytes(run_dir: Path, held: str, skip: tuple[str, ...] = ()) -> int:
    """Bytes of the files every worker keeps under its directories named ``held``, but those whose names start
    with one of ``skip``."""
    total = 0
    # os.walk, not a recursive glob: Spark deletes its scratch directories while we walk, which a glob raises on
    for root, dirs, files in os.walk(run_dir / "workers"):
        dirs[:] = [d for d in dirs if d != "spark-tmp"]
        if held not in Path(root).relative_to(run_dir).parts:
            continue
        for name in files:
            if name.startswith(skip):
                continue
            try:
                total += (Path(root) / name).stat().st_size
            except FileNotFoundError:  # collected or compacted while we counted
                pass
    return total


def buffer_bytes(run_dir: Path) -> int:
    """Bytes of the objects every worker holds (its ``objects/`` directory, ``worker/buffer.py``)."""
    return _bytes(run_dir, "objects")


def state_bytes(run_dir: Path) -> int:
    """Bytes of every worker's local state (its RocksDB directories, ``state/rocks.py``), without RocksDB's
    info log: capped apart (INFO_LOG_BYTES), it fills up to its cap over the first few hundred steps."""
    return _bytes(run_dir, "state", skip=("LOG",))


def redis_entries(r: redis.Redis, identity: str) -> tuple[int, int]:
    """The pipeline's keys, and their entries (fields of a hash, members of a set, items of a list)."""
    size = {b"hash": r.hlen, b"set": r.scard, b"list": r.llen, b"zset": r.zcard}
    keys = list(r.scan_iter(match=f"ftp:{{{identity}}}:*", count=1000))
    entries = 0
    for key in keys:
        kind = r.type(key)
        entries += int(size[kind](key)) if kind in size else 1
    return len(keys), entries


def znodes(zk: KazooClient, path: str) -> tuple[int, int]:
    """Znodes under ``path`` and their bytes."""
    count, total = 0, 0
    stack = [path]
    while stack:
        at = stack.pop()
        try:
            data, _ = zk.get(at)
            children = zk.get_children(at)
        except Exception:  # deleted meanwhile (compaction, pruning)
            continue
        count, total = count + 1, total + len(data)
        stack += [f"{at}/{c}" for c in children]
    return count, total


def _of(samples: list[dict[str, int]], metric: str, window: tuple[int, int]) -> list[int]:
    return [s[metric] for s in samples if metric in s and window[0] <= s["step"] < window[1]]


def peak(samples: list[dict[str, int]], metric: str, window: tuple[int, int]) -> int:
    return max(_of(samples, metric, window))


def median(samples: list[dict[str, int]], metric: str, window: tuple[int, int]) -> int:
    """What a window's samples hold most of the time: where the peak is a matter of when a sample fell (RocksDB's
    files on disk, a level's worth before each compaction), a leak still moves this."""
    return int(statistics.median(_of(samples, metric, window)))


def run_sampled(pipeline: Path, run_dir: Path, redis_url: str, zookeeper: str) -> tuple[CliRun, list[dict[str, int]]]:
    """The run, and what it held: the workers' files every FILES_EVERY_S, Redis entries and znodes every half
    second, each sample with the committed step it fell at."""
    identity = identity_of(pipeline)
    done: list[CliRun] = []
    runner = threading.Thread(target=lambda: done.append(run_cli(pipeline, run_dir, "--redis-url", redis_url,
                                                                 "--zookeeper", zookeeper, timeout_s=1500)))
    r = redis.Redis.from_url(redis_url)

    def step() -> int:
        return int(r.get(f"ftp:{{{identity}}}:committed") or 0)

    files: list[dict[str, int]] = []

    def sample_files() -> None:
        # its own thread, and often: the buffers are a sawtooth of a checkpoint interval's steps, and samples
        # taken at the pace of the slower ones below fell at one phase of it for a whole window (a step every
        # 70 ms, a sample every 10 steps or so)
        while runner.is_alive():
            at = step()
            files.append({"step": at, "buffer_bytes": buffer_bytes(run_dir), "state_bytes": state_bytes(run_dir)})
            time.sleep(FILES_EVERY_S)

    runner.start()
    filer = threading.Thread(target=sample_files)
    filer.start()
    zk = KazooClient(hosts=zookeeper)
    zk.start(timeout=30)
    samples: list[dict[str, int]] = []
    try:
        while runner.is_alive():
            at = step()
            keys, entries = redis_entries(r, identity)
            nodes, node_bytes = znodes(zk, base_path(identity))
            samples.append({"step": at, "redis_keys": keys, "redis_entries": entries, "znodes": nodes,
                            "znode_bytes": node_bytes})
            time.sleep(0.5)
    finally:
        runner.join()
        filer.join()
        r.close()
        zk.stop()
        zk.close()
    samples += files
    [run] = done
    assert run.code == 0, run.output[-3000:]
    assert len(run.summary["checkpoints"]) >= STEPS // 10 - 2, "the default interval checkpoints every 10 steps"
    assert "checkpoints are off" not in run.output
    for metric in ("buffer_bytes", "redis_entries"):
        assert len(_of(samples, metric, LATE)) >= 10, f"too few samples of {metric} in the late window"
    return run, samples


def flat(samples: list[dict[str, int]], metrics: tuple[str, ...], growth: float = GROWTH,
         stat: Callable[[list[dict[str, int]], str, tuple[int, int]], int] = peak) -> None:
    for metric in metrics:
        early, late = stat(samples, metric, EARLY), stat(samples, metric, LATE)
        print(f"{metric}: {stat.__name__} over steps {EARLY[0]}-{EARLY[1] - 1}: {early:,}; "
              f"over {LATE[0]}-{STEPS}: {late:,}")
        assert late <= early * growth + 16, f"{metric} grew from {early:,} to {late:,} over the run"


KEPT = ("redis_keys", "redis_entries", "znodes", "znode_bytes")  # the pipeline's Redis and ZooKeeper
HELD = ("buffer_bytes", *KEPT)


def test_five_hundred_steps_with_default_settings_stay_flat(tmp_path: Path, redis_url: str, zookeeper: str) -> None:
    pipeline = clickstream(tmp_path, "flat", steps=STEPS, workers=2, rows_per_step=300, checkpoint_every=None,
                           parallelism={"events": 2, "clean": 2, "per-user": 2, "output": 2})
    _, samples = run_sampled(pipeline, tmp_path / "run", redis_url, zookeeper)
    flat(samples, ("buffer_bytes",), stat=median)  # a sawtooth between checkpoints: what it holds most of the time
    flat(samples, KEPT)


def test_five_hundred_windowed_steps_keep_state_and_checkpoints_flat(tmp_path: Path, redis_url: str,
                                                                     zookeeper: str) -> None:
    """Per-user 5 s windows of event time (a step reads about a second of it): the windows close as the
    watermark passes them and leave the state, so the checkpoints' size stays flat too."""
    pipeline = clickstream(tmp_path, "flat-windows", steps=STEPS, workers=2, rows_per_step=300,
                           checkpoint_every=None, parallelism={"events": 2, "clean": 2, "per-user": 2, "output": 2},
                           event_window={"tumbling": {"size": "5s"}})
    run, samples = run_sampled(pipeline, tmp_path / "run", redis_url, zookeeper)
    for c in run.summary["checkpoints"]:
        samples.append({"step": c["boundary"], "checkpoint_bytes": c["bytes"]})
    # the buffers are a sawtooth between checkpoints whose peak is a matter of when a sample fell (349 and 438 KB
    # in a run on a loaded machine): what the samples hold most of the time, as for the join's (their medians came
    # 356 and 467 KB apart too while the samples fell every 10 steps or so, at one phase of the sawtooth)
    flat(samples, ("buffer_bytes",), stat=median)
    flat(samples, KEPT)  # Redis and ZooKeeper: their peaks, as before
    # a checkpoint's bytes are what it uploaded: RocksDB's compactions make them vary more than what it holds
    # (1.18x between the two halves in one run); state that grew with the run would double them and more
    flat([s for s in samples if "checkpoint_bytes" in s], ("checkpoint_bytes",), growth=1.5)
    assert run.summary["watermark"] is not None


def test_five_hundred_steps_of_a_join_and_a_keyed_function_keep_state_flat(tmp_path: Path, redis_url: str,
                                                                          zookeeper: str) -> None:
    """An interval join (impressions with the clicks 0-10 s after them) and a keyed function with timers and
    TTL (``eventtime/fraud_rule.py``) over unbounded streams, default settings: rows leave the join's state as
    the watermark passes their interval, the function's entries and timers leave with theirs, so the
    checkpoints stay flat."""
    import yaml

    here = Path(__file__).parent.parent / "eventtime"

    def source(function: str) -> dict[str, object]:
        return {"generator": {"function": function, "rowsPerStep": 200},
                "eventTime": {"column": "ts", "watermark": {"maxOutOfOrderness": "3s"}}}

    doc = {"apiVersion": "ftpipeline.io/v1alpha1", "kind": "FTPipeline", "metadata": {"name": "flat-joins"}, "spec": {
        "entryPoint": str(here / "streams.py"), "workers": 2, "steps": {"maxSteps": STEPS},
        "checkpoint": {"storage": {"path": str(tmp_path / "checkpoints")}},
        "deadLetter": {"path": str(tmp_path / "dead-letters")},
        "stages": [
            {"name": "impressions", "source": source("impressions")},
            {"name": "clicks", "source": source("clicks")},
            {"name": "payments", "source": source("payments")},
            {"name": "clicked", "parallelism": 2, "inputs": [{"stage": "impressions"}, {"stage": "clicks"}],
             "join": {"type": "left", "keys": ["ad"], "within": {"lower": "0s", "upper": "10s"}}},
            {"name": "rule", "parallelism": 2, "inputs": [{"stage": "payments"}],
             "process": {"class": "FraudRule", "keys": ["card"], "output": {
                 "card": "string", "kind": "string", "at": "long", "merchants": "long", "id": "long"}}},
            {"name": "joined", "parallelism": 2, "inputs": [{"stage": "clicked"}],
             "sink": {"parquet": {"path": str(tmp_path / "joined")}}},
            {"name": "alerts", "parallelism": 2, "inputs": [{"stage": "rule"}],
             "sink": {"parquet": {"path": str(tmp_path / "alerts")}}},
        ]}}
    pipeline = tmp_path / "flat-joins.yaml"
    pipeline.write_text(yaml.safe_dump(doc, sort_keys=False))
    run, samples = run_sampled(pipeline, tmp_path / "run", redis_url, zookeeper)
    for c in run.summary["checkpoints"]:
        samples.append({"step": c["boundary"], "checkpoint_bytes": c["bytes"]})
    # the join buffers a checkpoint interval's steps, and RocksDB holds a level's files before it compacts: their
    # peaks came 1.5x and 1.8x apart in 2 runs of 5 with the state flat (the checkpoints 700 and 715 KB)
    flat(samples, HELD, stat=median)
    flat(samples, ("state_bytes",), growth=1.5, stat=median)
    flat([s for s in samples if "checkpoint_bytes" in s], ("checkpoint_bytes",), growth=1.5)


def test_a_kill_with_default_settings_recomputes_about_what_was_lost(tmp_path: Path) -> None:
    """A worker holding a stateful channel is killed 4 steps after the default checkpoint: lineage
    recovery re-reads at most 1.1 times the work lost with it (``lineage/lost.py``), not the run's,
    and the output equals the oracle's."""
    pipeline = clickstream(tmp_path, "recompute", steps=20, workers=3, rows_per_step=3000, checkpoint_every=None)
    run = run_cli(pipeline, tmp_path / "run", "--kill-at-step", "14", "--kill-worker", "w2", "--verify")
    assert run.code == 0, run.output[-3000:]
    [recovery] = run.summary["recoveries"]
    lost, recomputed = recovery["lost_rows"], run.summary["stats"]["recomputed_rows"]
    print(f"lost work {lost:,} rows, recomputed {recomputed:,} ({recomputed / lost:.2f}x)")
    assert recovery["rebuilt"], "the kill should cost a stateful channel (else it tests little)"
    assert 0 < recomputed <= 1.1 * lost
    assert all(c["equal"] for c in run.summary["verify"])
