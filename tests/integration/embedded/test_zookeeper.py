"""The embedded ZooKeeper is ready only when it serves sessions, not when it first listens."""

from __future__ import annotations

from pathlib import Path

from kazoo.client import KazooClient

from ftpipeline.embedded.zookeeper import EmbeddedZooKeeper, serving


def open_session(connect: str) -> None:
    client = KazooClient(hosts=connect, timeout=4.0)
    client.start(timeout=3)  # well under a cold server's load time: only a serving one answers this fast
    client.create("/probe", b"x", ephemeral=True)
    client.stop()
    client.close()


def test_a_started_or_restarted_server_opens_a_session_at_once(tmp_path: Path) -> None:
    server = EmbeddedZooKeeper(tmp_path).start()
    try:
        assert serving(server.port)
        open_session(server.connect)
        server.kill()
        assert not serving(server.port)
        server.start()
        open_session(server.connect)
    finally:
        server.stop()
    assert not serving(server.port)
