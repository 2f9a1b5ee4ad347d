"""Integration tests: real Redis and ZooKeeper (started here, privately) and real PySpark with a JVM.

Set FTPIPELINE_TEST_REDIS_URL or FTPIPELINE_TEST_ZOOKEEPER to use existing servers instead.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from ftpipeline.embedded.redis import EmbeddedRedis
from ftpipeline.embedded.s3 import EmbeddedS3
from ftpipeline.embedded.zookeeper import EmbeddedZooKeeper


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def session_redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    configured = os.environ.get("FTPIPELINE_TEST_REDIS_URL")
    if configured:
        yield configured
        return
    server = EmbeddedRedis(tmp_path_factory.mktemp("redis")).start()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture(scope="session")
def session_zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Connect string of a real ZooKeeper (from the jars in the PySpark wheel)."""
    configured = os.environ.get("FTPIPELINE_TEST_ZOOKEEPER")
    if configured:
        yield configured
        return
    server = EmbeddedZooKeeper(tmp_path_factory.mktemp("zookeeper")).start()
    try:
        yield server.connect
    finally:
        server.stop()


@pytest.fixture(scope="session")
def redis_url(session_redis_url: str) -> str:
    return session_redis_url


@pytest.fixture(scope="session")
def zookeeper(session_zookeeper: str) -> str:
    """(A module may name its own ``zookeeper``, a server it breaks: ``shared_servers`` still gets this one.)"""
    return session_zookeeper


@pytest.fixture(scope="session", autouse=True)
def shared_servers(session_redis_url: str, session_zookeeper: str) -> Iterator[None]:
    """Runs through ``run_cli`` use the session's Redis and ZooKeeper unless they name their own or ask for
    private ones (``pipelines.SHARED``)."""
    from .pipelines import SHARED

    SHARED.update({"--redis-url": session_redis_url, "--zookeeper": session_zookeeper})
    yield
    SHARED.clear()


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedS3]:
    """A real S3-compatible server (``embedded/s3.py``) shared by the session's tests: each uses a bucket of
    its own (``s3_bucket``). A test that kills or restarts a server starts its own."""
    server = EmbeddedS3(tmp_path_factory.mktemp("s3")).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def s3_bucket(s3_server: EmbeddedS3) -> str:
    """A fresh, empty bucket on the shared server: ``s3://<it>`` is the test's own."""
    name = f"t-{uuid.uuid4().hex[:12]}"
    s3_server.create_bucket(name)
    return name


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


@pytest.fixture
def pipeline_name() -> str:
    return f"t{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """A plain local SparkSession for oracles (not a worker, not the runtime). Its Python workers run this
    interpreter, which has the test extras (pandas, for the SS twin of a keyed function)."""
    from ftpipeline.worker.session import build_session

    session = build_session("local[2]", {}, tmp_path_factory.mktemp("oracle-spark"), "ftpipeline-tests-oracle")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Bootstrap servers of a real Kafka broker (KRaft, from the pinned jars), shared by the session's tests:
    each test uses topics of its own. FTPIPELINE_TEST_KAFKA names an existing one instead."""
    configured = os.environ.get("FTPIPELINE_TEST_KAFKA")
    if configured:
        yield configured
        return
    from ftpipeline.embedded.kafka import EmbeddedKafka

    server = EmbeddedKafka(tmp_path_factory.mktemp("kafka")).start()
    try:
        yield server.bootstrap
    finally:
        server.stop()


@pytest.fixture
def topic_name() -> str:
    """A topic name no other test uses."""
    return f"t-{uuid.uuid4().hex[:10]}"
