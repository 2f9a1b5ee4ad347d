"""How the runtime's Kafka clients are configured, and how their failures are named.

Every client of a pipeline (a source's readers, a sink's transactional
producers, the oracle) is built from one function here, so they agree on
the cluster, on reading committed records only, and on where librdkafka's
own log lines go: the ``ftpipeline.kafka`` logger, as structured lines,
instead of librdkafka's stderr format, a line said again within 30 s
counted rather than written (``Repeats``).
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

log = logging.getLogger("ftpipeline.kafka")

REPEAT_WINDOW_S = 30.0  # a librdkafka line said again within this is counted, not written
_VARYING = re.compile(r"\(after \d+ms[^)]*\)|\d+(\.\d+)?ms")


class Repeats(logging.Filter):
    """librdkafka says a broker out of reach again at every reconnect of every client (800 lines in 20 s of an
    outage): a line passes the first time, and again once ``REPEAT_WINDOW_S`` passed, carrying how many like it
    were not written since (``repeated``). Lines are alike when equal but for their timings."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.clock = clock
        self._lock = threading.Lock()
        self._seen: dict[str, tuple[float, int]] = {}  # alike lines -> (when one was last written, held since)

    def filter(self, record: logging.LogRecord) -> bool:
        key = _VARYING.sub("", record.getMessage())
        now = self.clock()
        with self._lock:
            written, held = self._seen.get(key, (None, 0))
            if written is not None and now - written < REPEAT_WINDOW_S:
                self._seen[key] = (written, held + 1)
                return False
            if len(self._seen) > 1_000:  # a long run's lines of clients long gone
                self._seen = {k: v for k, v in self._seen.items() if now - v[0] < REPEAT_WINDOW_S}
            self._seen[key] = (now, 0)
        if held:
            record.repeated = held
        return True


log.addFilter(Repeats())

# What a call to the cluster may take before it is an error naming what it waited for.
TIMEOUT_S = 30.0


# The CA a TLS endpoint that names none trusts (the operator mounts spec.kafka.caSecretRef and sets it)
CA_ENV = "FTPIPELINE_KAFKA_CA"
# URL scheme -> security.protocol
SCHEMES = {"plaintext": "PLAINTEXT", "ssl": "SSL", "sasl-plaintext": "SASL_PLAINTEXT", "sasl-ssl": "SASL_SSL"}
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


@dataclass(frozen=True)
class Endpoint:
    """Where a pipeline's Kafka cluster is and how to reach it, from one string (``spec.kafka.bootstrapServers``
    or the Secret ``spec.kafka.secretRef`` names), as Redis URLs and ZooKeeper connect strings carry theirs:

        host:9092[,host:9092...]                      plaintext
        ssl://hosts[?ca=/path/ca.crt]                 TLS, trusting that CA (else the system's)
        sasl-ssl://user:password@hosts[?mechanism=SCRAM-SHA-512&ca=/path/ca.crt]
        sasl-plaintext://user:password@hosts[?mechanism=...]

    The mechanism is PLAIN unless given; user and password are percent-decoded."""

    servers: str
    protocol: str = "PLAINTEXT"
    mechanism: str = ""
    username: str = ""
    password: str = ""
    ca: str = ""

    @classmethod
    def parse(cls, text: str) -> Endpoint:
        if not text:
            raise ValueError("no Kafka bootstrap servers (spec.kafka.bootstrapServers)")
        if "://" not in text:
            return cls(text)
        scheme, _, rest = text.partition("://")
        if scheme not in SCHEMES:
            raise ValueError(f"Kafka endpoint: unknown scheme {scheme!r} (one of {', '.join(SCHEMES)})")
        rest, _, query = rest.partition("?")
        userinfo, at, servers = rest.rpartition("@")
        options = urllib.parse.parse_qs(query, keep_blank_values=True)
        unknown = sorted(set(options) - {"ca", "mechanism"})
        if unknown:
            raise ValueError(f"Kafka endpoint: unknown option {unknown[0]!r} (ca, mechanism)")
        sasl = scheme.startswith("sasl")
        user, _, password = userinfo.partition(":")
        if sasl and not (at and user and password):
            raise ValueError(f"Kafka endpoint: {scheme}:// needs user:password@ before the servers")
        if not sasl and at:
            raise ValueError(f"Kafka endpoint: {scheme}:// takes no user:password (use sasl-plaintext or sasl-ssl)")
        mechanism = options.get("mechanism", ["PLAIN"] if sasl else [""])[0]
        if sasl and mechanism not in MECHANISMS:
            raise ValueError(f"Kafka endpoint: unknown mechanism {mechanism!r} (one of {', '.join(MECHANISMS)})")
        if not servers:
            raise ValueError("Kafka endpoint: no servers")
        return cls(servers, SCHEMES[scheme], mechanism, urllib.parse.unquote(user),
                   urllib.parse.unquote(password), options.get("ca", [""])[0])

    def properties(self) -> dict[str, Any]:
        """The librdkafka properties that connect to it."""
        out: dict[str, Any] = {"bootstrap.servers": self.servers, "security.protocol": self.protocol}
        if self.mechanism:
            out.update({"sasl.mechanism": self.mechanism, "sasl.username": self.username,
                        "sasl.password": self.password})
        ca = self.ca or (os.environ.get(CA_ENV, "") if "SSL" in self.protocol else "")
        if ca:
            out["ssl.ca.location"] = ca
        return out


def config(bootstrap: str, **extra: Any) -> dict[str, Any]:
    """A client's configuration: the endpoint ``bootstrap`` (see :class:`Endpoint`) and the given librdkafka
    properties."""
    return {**Endpoint.parse(bootstrap).properties(), "logger": log, "log_level": 4, **extra}


def reader_config(bootstrap: str) -> dict[str, Any]:
    """A consumer that reads assigned partitions and never joins or commits a group: read_committed,
    and an offset out of range is an error, never a silent jump (a replay must read what it recorded).
    A recorded range is already on the broker, so a fetch need not wait for more data: with librdkafka's
    default wait (500 ms) each range read after the first took about that long (1,000 records: 507 ms,
    against 15 ms with this setting)."""
    return config(bootstrap, **{
        "group.id": "ftpipeline-reader", "enable.auto.commit": False, "enable.auto.offset.store": False,
        "isolation.level": "read_committed", "auto.offset.reset": "error", "enable.partition.eof": True,
        "fetch.wait.max.ms": 10,
    })


def send(producer: Producer, topic: str, value: bytes, key: bytes | None = None, **kwargs: Any) -> None:
    """``producer.produce``, waiting while its local queue is full (deliveries drain it)."""
    while True:
        try:
            producer.produce(topic, value=value, key=key, **kwargs)
            return
        except BufferError:
            producer.poll(0.05)


_UNREACHABLE = {KafkaError._TRANSPORT, KafkaError._TIMED_OUT, KafkaError._ALL_BROKERS_DOWN, KafkaError._MSG_TIMED_OUT,
                KafkaError._RESOLVE, KafkaError._TIMED_OUT_QUEUE, KafkaError.COORDINATOR_NOT_AVAILABLE,
                KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                KafkaError.UNSTABLE_OFFSET_COMMIT}  # an offset of a transaction still open: aborted in time


def unreachable(error: BaseException) -> bool:
    """Is this the cluster out of reach (it may answer again: wait), rather than a refusal (fenced, denied)?"""
    if not (isinstance(error, KafkaException) and error.args and isinstance(error.args[0], KafkaError)):
        return False
    err = error.args[0]
    return not err.fatal() and (err.code() in _UNREACHABLE or bool(err.retriable()))


def describe(error: BaseException) -> str:
    """A Kafka failure in one line: librdkafka's error name and message."""
    if isinstance(error, KafkaException) and error.args and isinstance(error.args[0], KafkaError):
        err = error.args[0]
        return f"{err.name()}: {err.str()}"
    return f"{type(error).__name__}: {error}"
