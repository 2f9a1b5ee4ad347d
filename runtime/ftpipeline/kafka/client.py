"""How the runtime's Kafka clients are configured, and how their failures are named.

Every client of a pipeline (a source's readers, a sink's transactional
producers, the oracle) is built from one function here, so they agree on
the cluster, on reading committed records only, and on where librdkafka's
own log lines go: the ``ftpipeline.kafka`` logger, as structured lines,
instead of librdkafka's stderr format.
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any

from confluent_kafka import KafkaError, KafkaException

log = logging.getLogger("ftpipeline.kafka")

# What a call to the cluster may take before it is an error naming what it waited for.
TIMEOUT_S = 30.0


def config(bootstrap: str, **extra: Any) -> dict[str, Any]:
    """A client's configuration: ``bootstrap`` and the given librdkafka properties."""
    if not bootstrap:
        raise ValueError("no Kafka bootstrap servers (spec.kafka.bootstrapServers)")
    return {"bootstrap.servers": bootstrap, "logger": log, "log_level": 4, **extra}


def reader_config(bootstrap: str) -> dict[str, Any]:
    """A consumer that reads assigned partitions and never joins or commits a group: read_committed,
    and an offset out of range is an error, never a silent jump (a replay must read what it recorded)."""
    return config(bootstrap, **{
        "group.id": "ftpipeline-reader", "enable.auto.commit": False, "enable.auto.offset.store": False,
        "isolation.level": "read_committed", "auto.offset.reset": "error", "enable.partition.eof": True,
    })


def short_id(identity: str) -> str:
    """A pipeline identity as it appears in transactional ids and group ids: a digest, short and plain."""
    return hashlib.sha256(identity.encode()).hexdigest()[:16]


def describe(error: BaseException) -> str:
    """A Kafka failure in one line: librdkafka's error name and message."""
    if isinstance(error, KafkaException) and error.args and isinstance(error.args[0], KafkaError):
        err = error.args[0]
        return f"{err.name()}: {err.str()}"
    return f"{type(error).__name__}: {error}"
