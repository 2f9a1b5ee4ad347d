"""Connect strings: one string carries the hosts, a digest identity and a TLS CA, and parses back whole; a
client's sockets give up on a silent server."""

from __future__ import annotations

import pytest

from ftpipeline.commandlog.zkclient import ConnectString, parse, parse_connect, with_identity


def test_a_plain_connect_string_is_hosts_alone() -> None:
    assert parse_connect("z1:2181,z2:2181/chroot") == ConnectString("z1:2181,z2:2181/chroot")


def test_identity_and_ca_travel_together_and_round_trip() -> None:
    text = with_identity("z:2281?ca=/etc/ftpipeline-stores/zookeeper/ca.crt", "pipe:line", "p@ss/word")
    parts = parse_connect(text)
    assert parts == ConnectString("z:2281", ("pipe:line", "p@ss/word"), "/etc/ftpipeline-stores/zookeeper/ca.crt")
    assert parse_connect(str(parts)) == parts
    assert parse(text) == ("z:2281", ("pipe:line", "p@ss/word"))
    assert with_identity(text, "other", "pw") == "digest://other:pw@z:2281?ca=/etc/ftpipeline-stores/zookeeper/ca.crt"


@pytest.mark.parametrize("text, field", [("z:2181?tls=1", "unknown option tls"), ("z:2181?ca=", "names no file"),
                                         ("digest://nopassword@z:2181", "digest://user:password@")])
def test_a_malformed_connect_string_is_refused_naming_what_is_wrong(text: str, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        parse_connect(text)


def test_a_clients_socket_gives_up_on_a_server_that_acknowledges_nothing() -> None:
    import socket

    from ftpipeline.commandlog.zkclient import SILENT_SERVER_MS, _Handler

    with socket.create_server(("127.0.0.1", 0)) as server:
        sock = _Handler().create_connection(server.getsockname(), timeout=5)
        try:
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT) == SILENT_SERVER_MS
        finally:
            sock.close()
