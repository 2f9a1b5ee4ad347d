"""The proxy the fault tests cut: a cut must really cut, or an outage test passes without an outage."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from .proxy import TcpProxy


@pytest.fixture
def echo() -> Iterator[int]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)

    def answer(conn: socket.socket) -> None:
        with conn:
            try:
                while data := conn.recv(1024):
                    conn.sendall(data)
            except OSError:
                pass

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=answer, args=(conn,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    yield server.getsockname()[1]
    server.shutdown(socket.SHUT_RDWR)
    server.close()


def _echoes(address: tuple[str, int]) -> bool:
    try:
        with socket.create_connection(address, timeout=2) as s:
            s.sendall(b"ping")
            return s.recv(16) == b"ping"
    except OSError:
        return False


def test_a_cut_refuses_every_new_connection_and_restore_lets_them_through(echo: int) -> None:
    proxy = TcpProxy(echo).start()
    address = (proxy.host, proxy.port)
    assert _echoes(address)
    open_conn = socket.create_connection(address, timeout=2)
    time.sleep(0.2)  # the accept thread is blocked in accept() again when the cut comes
    proxy.cut()
    assert open_conn.recv(16) == b""  # the open connection is broken
    open_conn.close()
    assert not any(_echoes(address) for _ in range(3))  # and none gets through, not even the first one
    proxy.restore()
    assert proxy.port == address[1] and _echoes(address)
    proxy.stop()
