"""A private, real Kafka broker for local runs and tests; the same command serves the chart's broker.

A pipeline that reads or writes Kafka and names no bootstrap servers gets
one, as it gets a Redis and a ZooKeeper: Apache Kafka in KRaft mode, one
process that is both its broker and its controller, from the pinned jars
(``jars.py``) on the JRE the workers already need. Its log
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
from dataclasses import dataclass
from pathlib import Path

from ftpipeline.embedded.jvm import jvm_command
from ftpipeline.embedded.jars import KAFKA
from ftpipeline.embedded.ports import free_port
from ftpipeline.embedded.private import pem_keystore, write_private
from ftpipeline.embedded.process import ServerProcess

fetch = KAFKA.fetch  # what the broker lacks of its jars (a test replaces it)

# A test's or a laptop's broker: a small heap, and (as for ZooKeeper) C1 and the serial collector, which
# start fast and leave the cores to the workers. FTPIPELINE_KAFKA_JAVA_OPTIONS replaces them.
KAFKA_JAVA_OPTIONS = "-Xmx512m -XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


@dataclass(frozen=True)
class Secure:
    """A listener that takes SASL over TLS alone: the server's certificate and key (``tls.crt``, ``tls.key`` in
    a directory), and the users PLAIN accepts (name -> password)."""

    port: int
    keystore: Path
    users: dict[str, str]

    def properties(self) -> list[str]:
        users = " ".join(f'user_{name}="{password}"' for name, password in sorted(self.users.items()))
        return [
            "listener.name.secure.sasl.enabled.mechanisms=PLAIN",
            f"listener.name.secure.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule "
            f"required {users};",
            "listener.name.secure.ssl.keystore.type=PEM",
            f"listener.name.secure.ssl.keystore.location={self.keystore}",
        ]


def broker_config(data_dir: Path, port: int, controller_port: int, advertise: str = "127.0.0.1",
                  bind: str = "127.0.0.1", secure: Secure | None = None) -> str:
    """server.properties of a single-node KRaft cluster: one replica of everything, the internal topics of
    consumer groups and transactions included (the default of three would leave them unavailable), and one
    partition of each of those (not 50: a restart after a crash recovers and loads them before it serves
    groups and transactions, which took longer than 30 s with 50). With ``secure``, clients are served on its
    port by SASL_SSL, and the plaintext listener, which the broker uses itself, is bound to loopback."""
    listeners = [f"PLAINTEXT://{'127.0.0.1' if secure else bind}:{port}", f"CONTROLLER://127.0.0.1:{controller_port}"]
    advertised = [f"PLAINTEXT://{'127.0.0.1' if secure else advertise}:{port}"]
    protocols = "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
    if secure:
        listeners.append(f"SECURE://{bind}:{secure.port}")
        advertised.append(f"SECURE://{advertise}:{secure.port}")
        protocols += ",SECURE:SASL_SSL"
    return "\n".join([
        "process.roles=broker,controller",
        "node.id=1",
        f"controller.quorum.bootstrap.servers=127.0.0.1:{controller_port}",
        f"listeners={','.join(listeners)}",
        f"advertised.listeners={','.join(advertised)}",
        "controller.listener.names=CONTROLLER",
        "inter.broker.listener.name=PLAINTEXT",
        f"listener.security.protocol.map={protocols}",
        *(secure.properties() if secure else []),
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
    return jvm_command("FTPIPELINE_KAFKA_JAVA_OPTIONS", KAFKA_JAVA_OPTIONS, KAFKA.classpath(jars), main, args)


def cluster_id() -> str:
    """A new cluster's id, as Kafka's ``random-uuid`` makes one: 16 random bytes in URL-safe base64, drawn again
    while it starts with a dash (the format tool would read it as an option: one id in 64 did)."""
    while True:
        found = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not found.startswith("-"):
            return found


def prepare(conf_dir: Path, data_dir: Path, port: int, controller_port: int, advertise: str = "127.0.0.1",
            bind: str = "127.0.0.1", jars: Path | None = None, secure: Secure | None = None) -> list[str]:
    """Fetch what the jar directory lacks, write the broker's configuration, format its log directories if
    they are new (a restart keeps them), and return the command that runs it."""
    jars = jars or KAFKA.jars_dir()
    fetch(jars)  # nothing when every locked jar is there
    conf_dir.mkdir(parents=True, exist_ok=True)
    data_dir.mkdir(parents=True, exist_ok=True)
    config = conf_dir / "server.properties"
    write_private(config, broker_config(data_dir, port, controller_port, advertise, bind, secure).encode())
    if not (data_dir / "meta.properties").exists():
        done = subprocess.run(_java_command(jars, "kafka.tools.StorageTool", "format", "--standalone", "-t",
                                            cluster_id(), "-c", str(config)), capture_output=True, text=True)
        if done.returncode != 0:
            said = (done.stderr or done.stdout).strip().splitlines()
            raise RuntimeError(f"Kafka could not format its log directory {data_dir}: "
                               f"{said[-1] if said else f'exit code {done.returncode}'}")
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

    def __init__(self, directory: Path, jars: Path | None = None, tls_dir: Path | None = None,
                 users: dict[str, str] | None = None) -> None:
        super().__init__(directory)
        self.jars = jars
        self.port = 0
        self.controller_port = 0
        self.secure_port = 0
        self.tls_dir, self.users = tls_dir, users or {}  # with tls_dir, clients are served by SASL_SSL

    @property
    def bootstrap(self) -> str:
        """The plaintext listener's address (loopback alone when the broker serves SASL_SSL)."""
        return f"127.0.0.1:{self.port}"

    def secure_bootstrap(self, user: str, password: str, ca: Path) -> str:
        """An endpoint (``kafka/client.py``) of the SASL_SSL listener for ``user``, trusting ``ca``."""
        return f"sasl-ssl://{user}:{password}@localhost:{self.secure_port}?ca={ca}"

    def start(self, timeout_s: float = 90.0) -> EmbeddedKafka:
        self._reap()  # a killed run's broker still holds the log directories' lock
        self.port = self.port or free_port()  # a restart keeps the address its clients know
        self.controller_port = self.controller_port or free_port()
        secure = None
        if self.tls_dir is not None:
            self.secure_port = self.secure_port or free_port()
            keystore = pem_keystore(self.tls_dir, self.directory / "keystore.pem")
            secure = Secure(self.secure_port, keystore, self.users)
        args = prepare(self.directory, self.directory / "data", self.port, self.controller_port, jars=self.jars,
                       secure=secure, advertise="localhost" if secure else "127.0.0.1")  # the name its certificate has
        self._launch(args, lambda: serving(self.bootstrap), timeout_s, interval_s=0.2)
        return self
