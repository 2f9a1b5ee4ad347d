"""A private, real Kafka broker for local runs and tests; the same command serves the chart's broker.

A pipeline that reads or writes Kafka and names no bootstrap servers gets
one, as it gets a Redis and a ZooKeeper: Apache Kafka in KRaft mode, one
process that is both its broker and its controller, from the pinned jars
(``kafkajars.py``) on the JRE the workers already need. Its log
directories stay in its directory, so a restart (``kill`` then ``start``)
keeps every committed record, offset and transaction, on the same ports.

    (new) --format the log dirs, once--> (formatted) --start--> (serving)
    (serving) --kill or stop--> (formatted) --start--> (serving)

"Serving" means a client's metadata request is answered, not only that the
port listens: the controller elects itself and the broker registers before
that, a few seconds after the JVM starts.
"""

from __future__ import annotations

import base64
import subprocess
import uuid
from pathlib import Path

from ftpipeline.embedded.jvm import jvm_command
from ftpipeline.embedded.kafkajars import classpath, fetch, jars_dir
from ftpipeline.embedded.ports import free_port
from ftpipeline.embedded.process import ServerProcess

# A test's or a laptop's broker: a small heap, and (as for ZooKeeper) C1 and the serial collector, which
# start fast and leave the cores to the workers. FTPIPELINE_KAFKA_JAVA_OPTIONS replaces them.
KAFKA_JAVA_OPTIONS = "-Xmx512m -XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def broker_config(data_dir: Path, port: int, controller_port: int, advertise: str = "127.0.0.1",
                  bind: str = "127.0.0.1") -> str:
    """server.properties of a single-node KRaft cluster: one replica of everything, the internal topics of
    consumer groups and transactions included (the default of three would leave them unavailable), and one
    partition of each of those (not 50: a restart after a crash recovers and loads them before it serves
    groups and transactions, which took longer than 30 s with 50)."""
    return "\n".join([
        "process.roles=broker,controller",
        "node.id=1",
        f"controller.quorum.bootstrap.servers=127.0.0.1:{controller_port}",
        f"listeners=PLAINTEXT://{bind}:{port},CONTROLLER://127.0.0.1:{controller_port}",
        f"advertised.listeners=PLAINTEXT://{advertise}:{port}",
        "controller.listener.names=CONTROLLER",
        "inter.broker.listener.name=PLAINTEXT",
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        f"log.dirs={data_dir}",
        "num.partitions=1",
        "offsets.topic.replication.factor=1",
        "offsets.topic.num.partitions=1",
        "transaction.state.log.replication.factor=1",
        "transaction.state.log.num.partitions=1",
        "transaction.state.log.min.isr=1",
        "share.coordinator.state.topic.replication.factor=1",
        "share.coordinator.state.topic.min.isr=1",
        "group.initial.rebalance.delay.ms=0",
        "auto.create.topics.enable=false",  # a misspelt topic is an error, not a new empty topic
        "",
    ])


def _java_command(jars: Path, main: str, *args: str) -> list[str]:
    return jvm_command("FTPIPELINE_KAFKA_JAVA_OPTIONS", KAFKA_JAVA_OPTIONS, classpath(jars), main, args)


def prepare(conf_dir: Path, data_dir: Path, port: int, controller_port: int, advertise: str = "127.0.0.1",
            bind: str = "127.0.0.1", jars: Path | None = None) -> list[str]:
    """Fetch what the jar directory lacks, write the broker's configuration, format its log directories if
    they are new (a restart keeps them), and return the command that runs it."""
    jars = jars or jars_dir()
    fetch(jars)  # nothing when every locked jar is there
    conf_dir.mkdir(parents=True, exist_ok=True)
    data_dir.mkdir(parents=True, exist_ok=True)
    config = conf_dir / "server.properties"
    config.write_text(broker_config(data_dir, port, controller_port, advertise, bind))
    if not (data_dir / "meta.properties").exists():
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")  # as Kafka's random-uuid
        subprocess.run(_java_command(jars, "kafka.tools.StorageTool", "format", "--standalone", "-t", cluster_id,
                                     "-c", str(config)), check=True, capture_output=True)
    return _java_command(jars, "kafka.Kafka", str(config))


def serving(bootstrap: str, timeout_s: float = 2.0) -> bool:
    """Whether the broker answers a metadata request (its controller elected, the broker registered)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    try:
        metadata = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0}).list_topics(timeout=timeout_s)
    except KafkaException:
        return False
    return bool(metadata.brokers)


class EmbeddedKafka(ServerProcess):
    what, stem, marker = "Kafka", "kafka", b"kafka.Kafka"
    stop_grace_s = 30.0

    def __init__(self, directory: Path, jars: Path | None = None) -> None:
        super().__init__(directory)
        self.jars = jars
        self.port = 0
        self.controller_port = 0

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 90.0) -> EmbeddedKafka:
        self._reap()  # a killed run's broker still holds the log directories' lock
        self.port = self.port or free_port()  # a restart keeps the address its clients know
        self.controller_port = self.controller_port or free_port()
        args = prepare(self.directory, self.directory / "data", self.port, self.controller_port, jars=self.jars)
        self._launch(args, lambda: serving(self.bootstrap), timeout_s, interval_s=0.2)
        return self
