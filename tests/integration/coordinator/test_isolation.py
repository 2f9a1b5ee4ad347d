"""Two pipelines of one name share a Redis and a ZooKeeper (as the chart runs them) and nothing else.

Against real servers: each pipeline's keys and znodes are under its identity
(namespace + name + uid on Kubernetes, name + run directory locally), so a
fresh start or a deletion of one leaves the other's state as it was.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import redis
from kazoo.client import KazooClient

from ftpipeline.cli import run_identity
from ftpipeline.commandlog.zklog import base_path
from ftpipeline.coordinator.session import Session, open_session
from ftpipeline.lineage.naming import WorkerId
from ftpipeline.lineage.tables import LineageTables
from ftpipeline.spec import parse_pipeline

PIPELINE = """
apiVersion: ftpipeline.io/v1alpha1
kind: FTPipeline
metadata: {name: clickstream}
spec:
  image: x
  entryPoint: m.py
  workers: 1
  stages:
    - {name: src, parallelism: 1, source: {generator: {function: gen, rowsPerStep: 4}}}
    - {name: out, parallelism: 1, inputs: [{stage: src}], sink: {parquet: {path: out}}}
"""


def _state(r: redis.Redis, zk: KazooClient, identity: str) -> tuple[list[bytes], list[str]]:
    keys = sorted(r.scan_iter(match=f"ftp:{{{identity}}}:*"))
    return keys, sorted(zk.get_children(base_path(identity))) if zk.exists(base_path(identity)) else []


def _used(session: Session) -> None:
    """What a run leaves: lineage and stats in Redis, a committed step in the command log."""
    session.tables.admit(WorkerId("w0"))
    session.store.add_stats({"tasks": 3})
    assert session.commands is not None
    session.commands.append("step-started", step=1, offsets={"src.0": [0, 4]})
    session.commands.append("step-committed", step=1)


def test_same_name_other_namespace_shares_nothing(tmp_path: Path, redis_url: str, zookeeper: str,
                                                  pipeline_name: str) -> None:
    base = replace(parse_pipeline(PIPELINE, tmp_path, check_entry_point=False), redis_url=redis_url,
                   zookeeper=zookeeper)
    a = replace(base, identity=f"team-a.clickstream.{pipeline_name}-1")
    b = replace(base, identity=f"team-b.clickstream.{pipeline_name}-2")
    r = redis.Redis.from_url(redis_url)
    zk = KazooClient(hosts=zookeeper)
    zk.start(timeout=30)
    try:
        for spec in (a, b):
            session = open_session(spec, resuming=False)
            _used(session)
            session.close()
        b_before = _state(r, zk, b.store_key)
        assert b_before[0] and "log" in b_before[1]

        again = open_session(a, resuming=False)  # a fresh start of a clears a's history only
        assert again.store.stats() == {} and _state(r, zk, b.store_key) == b_before
        again.close()
        assert LineageTables(r, a.store_key).clear() >= 0  # the finalizer's clean-up of a
        assert _state(r, zk, b.store_key) == b_before
        assert not list(r.scan_iter(match="ftp:{clickstream}:*"))  # nothing keyed by the bare name
    finally:
        r.close()
        zk.stop()
        zk.close()


def test_the_operator_resumes_a_pipeline_whose_log_holds_a_commit(tmp_path: Path, redis_url: str,
                                                                  zookeeper: str, pipeline_name: str) -> None:
    """An operator that died before its status recorded the first commit must not start the pipeline
    over (its output would be kept and its own first steps dropped): the uid-keyed log says it ran."""
    spec = replace(parse_pipeline(PIPELINE, tmp_path, check_entry_point=False), redis_url=redis_url,
                   zookeeper=zookeeper, identity=f"ns.clickstream.{pipeline_name}")
    first = open_session(spec, resuming=False, resume_if_started=True)
    assert not first.resuming
    first.close()
    second = open_session(spec, resuming=False, resume_if_started=True)
    assert not second.resuming  # a log without a commit: still a fresh pipeline
    _used(second)
    second.close()
    third = open_session(spec, resuming=False, resume_if_started=True)
    assert third.resuming and third.commands is not None and third.commands.load().committed == 1
    third.close()


def test_a_local_pipeline_is_keyed_by_its_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    here, there = tmp_path / "a" / "pipeline.yaml", tmp_path / "b" / "pipeline.yaml"
    assert run_identity("clicks", here) != run_identity("clicks", there)
    assert run_identity("clicks", here).startswith("clicks.")
    monkeypatch.chdir(tmp_path)
    assert run_identity("clicks", Path("a/pipeline.yaml")) == run_identity("clicks", here)  # any spelling
