"""Kafka endpoints: one string says where the cluster is and how to get in (kafka/client.py); librdkafka's lines
said again and again are written once a window."""

from __future__ import annotations

import pytest

from ftpipeline.kafka.client import Endpoint, config
from ftpipeline.obs.errors import redacted


def test_a_plain_list_of_servers_is_plaintext() -> None:
    assert Endpoint.parse("a:9092,b:9092").properties() == {"bootstrap.servers": "a:9092,b:9092",
                                                           "security.protocol": "PLAINTEXT"}


def test_sasl_over_tls_with_a_ca_and_a_mechanism() -> None:
    e = Endpoint.parse("sasl-ssl://app%40corp:p%3Ass@k1:9093,k2:9093?mechanism=SCRAM-SHA-512&ca=/etc/ca.crt")
    assert e.properties() == {"bootstrap.servers": "k1:9093,k2:9093", "security.protocol": "SASL_SSL",
                              "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "app@corp",
                              "sasl.password": "p:ss", "ssl.ca.location": "/etc/ca.crt"}
    assert Endpoint.parse("sasl-plaintext://u:p@k:9092").mechanism == "PLAIN"
    assert Endpoint.parse("ssl://k:9093").properties()["security.protocol"] == "SSL"
    assert redacted("sasl-ssl://u:secret@k:9093") == "sasl-ssl://u:***@k:9093"


@pytest.mark.parametrize("text,says", [
    ("", "no Kafka bootstrap servers"),
    ("https://k:9093", "unknown scheme 'https'"),
    ("sasl-ssl://k:9093", "needs user:password@"),
    ("ssl://u:p@k:9093", "takes no user:password"),
    ("sasl-ssl://u:p@k:9093?mechanism=GSSAPI", "unknown mechanism 'GSSAPI'"),
    ("ssl://k:9093?cafile=/x", "unknown option 'cafile'"),
    ("ssl://", "no servers"),
])
def test_an_endpoint_that_cannot_be_used_says_why(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        config(text)


def test_a_librdkafka_line_said_again_and_again_is_written_once_per_window_with_its_count() -> None:
    """A broker out of reach: every client says so at every reconnect. Alike lines (equal but for their timings)
    pass once per window, the next one carrying how many were held; other lines pass as they come."""
    import logging

    from ftpipeline.kafka.client import REPEAT_WINDOW_S, Repeats

    now = [0.0]
    repeats = Repeats(clock=lambda: now[0])

    def line(text: str) -> logging.LogRecord:
        return logging.LogRecord("ftpipeline.kafka", logging.ERROR, __file__, 1, text, (), None)

    refused = ("FAIL [rdkafka#consumer-2] [thrd:127.0.0.1:39231/bootstrap]: Connect to ipv4#127.0.0.1:39231 failed: "
               "Connection refused (after {}ms in state CONNECT)")
    passed = []
    for i in range(400):  # 20 s of one every 50 ms
        now[0] = i * 0.05
        record = line(refused.format(i % 3))
        if repeats.filter(record):
            passed.append(record)
        if i == 10:
            assert repeats.filter(line("FAIL [rdkafka#producer-6] Disconnected: connection reset by peer"))
    assert len(passed) == 1 and not hasattr(passed[0], "repeated")
    now[0] = REPEAT_WINDOW_S + 1
    again = line(refused.format(7))
    assert repeats.filter(again) and again.repeated == 399  # type: ignore[attr-defined]
    assert not repeats.filter(line(refused.format(8)))
