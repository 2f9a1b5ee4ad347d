"""Kafka endpoints: one string says where the cluster is and how to get in (kafka/client.py)."""

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
