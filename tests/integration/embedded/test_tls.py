"""Redis and ZooKeeper serving clients over TLS alone, as the chart runs them by default.

Each test crosses the boundary twice and is refused both times — a
plaintext client, and a TLS client that trusts another CA (a server it
cannot tell from an impostor) — and checks that nothing was written, then
that a client trusting the servers' CA works.
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError

from ftpipeline.commandlog.zkclient import connect
from ftpipeline.embedded.redis import EmbeddedRedis
from ftpipeline.embedded.zookeeper import EmbeddedZooKeeper, serving
from ftpipeline.worker.tls import generate

# kazoo does not close the TLS socket of a reconnect that a stopped server refused; CPython closes it when
# it is collected, with a ResourceWarning that may surface at any later test of this module
pytestmark = pytest.mark.filterwarnings("ignore:Exception ignored in. <ssl.SSLSocket:pytest.PytestUnraisableExceptionWarning")


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The servers' directory (CA, certificate naming localhost, key) and another CA's."""
    base = tmp_path_factory.mktemp("store-tls")
    return generate("stores", ("localhost",)).write(base / "ours"), generate("other", ("localhost",)).write(base / "other")


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory: pytest.TempPathFactory, certs: tuple[Path, Path]) -> Iterator[EmbeddedZooKeeper]:
    server = EmbeddedZooKeeper(tmp_path_factory.mktemp("zk-tls"), tls_dir=certs[0]).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory, certs: tuple[Path, Path]) -> Iterator[EmbeddedRedis]:
    server = EmbeddedRedis(tmp_path_factory.mktemp("redis-tls"), tls_dir=certs[0]).start()
    yield server
    server.stop()


def test_zookeeper_refuses_plaintext_and_a_foreign_ca_on_its_client_port(zookeeper: EmbeddedZooKeeper,
                                                                         certs: tuple[Path, Path]) -> None:
    plain = KazooClient(hosts=f"127.0.0.1:{zookeeper.port}", timeout=4.0)
    with pytest.raises(KazooTimeoutError):
        plain.start(timeout=4)
    plain.stop()
    plain.close()
    # the handshake a client trusting another CA makes (kazoo's own, through connect(), retries it forever)
    context = ssl.create_default_context(cafile=str(certs[1] / "ca.crt"))
    with socket.create_connection(("localhost", zookeeper.port), timeout=5) as raw:
        with pytest.raises(ssl.SSLCertVerificationError):
            context.wrap_socket(raw, server_hostname="localhost")

    client = connect(zookeeper.connect)
    try:
        assert client.exists("/ftpipeline") is None, "neither refused client wrote anything"
        client.create("/ftpipeline/probe", b"over tls", makepath=True)
        assert client.get("/ftpipeline/probe")[0] == b"over tls"
    finally:
        client.stop()
        client.close()
    assert serving(zookeeper.probe_port), "the plaintext probe port answers srvr on the loopback interface"


def test_a_tls_zookeeper_session_survives_a_server_restart(zookeeper: EmbeddedZooKeeper) -> None:
    """The TLS handshake is redone on every reconnect: a kill and restart of the server is an outage the
    client waits out, as in plaintext (commandlog/zkclient.py)."""
    client = connect(zookeeper.connect, timeout_s=10.0)
    try:
        client.ensure_path("/restart")
        zookeeper.kill()
        zookeeper.start()
        client.create("/restart/after", b"x")
        assert client.get_children("/restart") == ["after"]
    finally:
        client.stop()
        client.close()


def test_redis_refuses_plaintext_and_a_foreign_ca_on_its_port(redis_server: EmbeddedRedis,
                                                              certs: tuple[Path, Path]) -> None:
    with pytest.raises(redis.ConnectionError):
        redis.Redis(host="localhost", port=redis_server.port, socket_timeout=5).set("k", "plain")
    foreign = f"rediss://localhost:{redis_server.port}/0?ssl_ca_certs={certs[1] / 'ca.crt'}"
    with pytest.raises(redis.ConnectionError, match="certificate verify failed"):
        redis.Redis.from_url(foreign, socket_timeout=5).set("k", "foreign")

    client = redis.Redis.from_url(redis_server.url)
    try:
        assert client.get("k") is None, "neither refused client wrote anything"
        assert client.set("k", "tls") and client.get("k") == b"tls"
        assert client.connection_pool.connection_class.__name__ == "SSLConnection"
    finally:
        client.close()
