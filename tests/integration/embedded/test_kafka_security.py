"""Kafka over SASL_SSL: a pipeline reads and writes as its user, and every other way in is refused.

The broker is the embedded one with a SASL_SSL listener (PLAIN users over
TLS), its plaintext listener on loopback alone. Each refusal is checked to
have changed nothing: the topic holds what it held before.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient

from ftpipeline.embedded.kafka import EmbeddedKafka
from ftpipeline.kafka.client import config
from ftpipeline.kafka.topics import create_topics, produce, read_committed
from ftpipeline.worker.tls import generate
from tests.integration.pipelines import kafka_clickstream, run_cli


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("kafka-tls")
    return generate("kafka", ("localhost",)).write(base / "ours"), generate("other", ("localhost",)).write(base / "other")


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory, certs: tuple[Path, Path]) -> Iterator[EmbeddedKafka]:
    server = EmbeddedKafka(tmp_path_factory.mktemp("kafka-secure"), tls_dir=certs[0],
                           users={"alice": "alice-secret", "bob": "bob-secret"}).start()
    yield server
    server.stop()


def refused(endpoint: str, topic: str) -> str:
    """What a client at ``endpoint`` gets when it writes one record to ``topic``."""
    errors: list[str] = []
    producer = Producer(config(endpoint, **{"message.timeout.ms": 8000, "log_level": 0}))
    producer.produce(topic, value=b"intruder", on_delivery=lambda err, _: errors.append(err.name() if err else "ok"))
    producer.flush(15)
    return errors[0] if errors else "no answer"


def test_only_a_user_with_its_password_over_tls_trusting_the_broker_gets_in(
        broker: EmbeddedKafka, certs: tuple[Path, Path], topic_name: str) -> None:
    ours, other = certs[0] / "ca.crt", certs[1] / "ca.crt"
    create_topics(broker.bootstrap, {topic_name: 1})  # the operator's loopback listener
    alice = broker.secure_bootstrap("alice", "alice-secret", ours)
    assert produce(alice, topic_name, [b"one", b"two"]) == 2
    attempts = {
        "wrong password": broker.secure_bootstrap("alice", "guess", ours),
        "unknown user": broker.secure_bootstrap("mallory", "alice-secret", ours),
        "another CA": broker.secure_bootstrap("alice", "alice-secret", other),
        "plaintext": f"localhost:{broker.secure_port}",
        "TLS without SASL": f"ssl://localhost:{broker.secure_port}?ca={ours}",
    }
    with ThreadPoolExecutor(len(attempts)) as tries:  # each waits out its own message timeout: side by side
        outcomes = dict(zip(attempts, tries.map(lambda endpoint: refused(endpoint, topic_name), attempts.values())))
    assert all(o != "ok" for o in outcomes.values()), outcomes
    print(outcomes)
    with pytest.raises(KafkaException):
        AdminClient(config(attempts["wrong password"], log_level=0)).list_topics(timeout=8)
    assert [r.value for r in read_committed(alice, topic_name)] == [b"one", b"two"]  # nothing else got in


def test_a_pipeline_runs_over_sasl_ssl_and_equals_the_oracle(broker: EmbeddedKafka, certs: tuple[Path, Path],
                                                            tmp_path: Path) -> None:
    bob = broker.secure_bootstrap("bob", "bob-secret", certs[0] / "ca.crt")
    pipeline, data = kafka_clickstream(tmp_path, "ksecure", broker.bootstrap, records=4000, per_step=1000)
    spec = pipeline.read_text().replace(f"bootstrapServers: {broker.bootstrap}", f"bootstrapServers: {bob}")
    assert bob in spec
    pipeline.write_text(spec)
    run = run_cli(pipeline, tmp_path / "run", "--produce", f"ksecure-clicks={data}", "--verify", "--kill-at-step", "2")
    assert run.code == 0, run.output[-4000:]
    assert "bob-secret" not in run.output
    verdicts = run.summary["verify"]
    assert verdicts and all(v["equal"] for v in verdicts), verdicts
    assert json.loads(json.dumps(run.summary["recoveries"]))
