"""A private, real ZooKeeper for local runs, from the jars inside the PySpark wheel.

PySpark ships ``zookeeper-3.9.x.jar`` with its dependencies, and the JRE it
needs is already required; ``ZooKeeperServerMain PORT DATADIR`` runs a
standalone server from them. Started on a free loopback port when the
pipeline names no ZooKeeper, stopped when the run ends.

The same command serves the chart's in-cluster ZooKeeper (``ftpipeline
serve-zookeeper``), where it may serve clients over TLS alone: its client
port is then Netty's secure port, with the certificate from a
``kubernetes.io/tls``-style directory (``ca.crt``, ``tls.crt``,
``tls.key``), and a plaintext port stays open on the loopback interface
only, for the readiness probe's ``srvr`` inside the pod.

An ensemble (the chart's ``zookeeper.replicas``: 3 or 5) is the same
command given every member's host and its own id: ``server.N`` lines and a
``myid`` file, run by ``QuorumPeerMain``. Members talk to each other in
plaintext on two ports (2888: followers to the leader, 3888: elections); on
Kubernetes a NetworkPolicy lets only the members reach them. A member
serves clients while it belongs to a quorum: one of three may be lost and
the other two go on, its clients moving to them within their session.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from pathlib import Path

from ftpipeline.embedded.jvm import jvm_command
from ftpipeline.embedded.ports import free_port
from ftpipeline.embedded.private import pem_keystore
from ftpipeline.embedded.process import ServerProcess


def pyspark_jars() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent / "jars"


TICK_MS = 500  # session timeouts (worker heartbeats) may then be chosen between 1 s and 10 s

# ZooKeeper shares the machine (or the node) with the workers' JVMs, and a run is short next to the
# time C2 needs to pay off: its JIT threads and G1's kept compiling and collecting through the run.
# With C1 alone and the serial collector, its CPU over a 60-step clickstream run (30k rows per
# step, three workers, two cores) fell from 2.8 s to 1.65 s, and fault tolerance on / off rose from
# 0.93 to 0.97 (bench/ft_overhead.py). Requests are small; C1's code serves them well.
# FTPIPELINE_ZOOKEEPER_JAVA_OPTIONS replaces them.
ZOOKEEPER_JAVA_OPTIONS = "-Xmx256m -XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


QUORUM_PORT, ELECTION_PORT = 2888, 3888


@dataclass(frozen=True)
class Ensemble:
    """The members of an ensemble, in id order (member ``i`` of the list has id ``i + 1``), each ``host`` or
    ``host:quorum_port:election_port``, and which of them this server is."""

    members: tuple[str, ...]
    my_id: int

    def __post_init__(self) -> None:
        if len(self.members) < 3 or len(self.members) % 2 == 0:
            raise ValueError(f"--servers: an ensemble has an odd number of members, at least 3 (got "
                             f"{len(self.members)}): a majority of them must stay to serve")
        if not 1 <= self.my_id <= len(self.members):
            raise ValueError(f"--id {self.my_id}: not one of the {len(self.members)} members' ids (1 to "
                             f"{len(self.members)})")
        for member in self.members:
            ports = member.split(":")[1:]
            if len(ports) not in (0, 2) or not all(p.isdigit() for p in ports):
                raise ValueError(f"--servers: member {member!r} is host or host:quorum-port:election-port")

    def lines(self) -> list[str]:
        # ticks of 500 ms: 10 s for a follower's first sync; 3 s of silence drop a follower (a GC pause must
        # not; a silent leader is noticed as late). A member's own name may resolve before its address is
        # up: listen on every address.
        out = ["initLimit=20", "syncLimit=6", "quorumListenOnAllIPs=true"]
        for i, member in enumerate(self.members, start=1):
            host, *ports = member.split(":")
            quorum, election = ports if ports else (QUORUM_PORT, ELECTION_PORT)
            out.append(f"server.{i}={host}:{quorum}:{election}")
        return out


def member_id(hostname: str) -> int:
    """A StatefulSet pod's id in its ensemble: its ordinal plus one (``ftp-zookeeper-2`` is member 3)."""
    head, _, ordinal = hostname.rpartition("-")
    if not head or not ordinal.isdigit():
        raise ValueError(f"--id auto: the host name {hostname!r} does not end in a StatefulSet ordinal (-0, -1, ...)")
    return int(ordinal) + 1


def zookeeper_config(data_dir: Path, port: int, tls_dir: Path | None = None, probe_port: int | None = None,
                     conf_dir: Path | None = None, bind: str | None = None, ensemble: Ensemble | None = None) -> Path:
    """``zoo.cfg`` in ``conf_dir`` (default: ``data_dir``). Plaintext clients on ``port`` of ``bind`` (default:
    every interface); with ``tls_dir``, TLS clients alone on ``port`` and plaintext on ``probe_port`` of the
    loopback interface. With ``ensemble``, its members and this server's ``myid`` (in ``data_dir``)."""
    conf_dir = conf_dir or data_dir
    conf_dir.mkdir(parents=True, exist_ok=True)
    lines = [f"tickTime={TICK_MS}", f"dataDir={data_dir}", "admin.enableServer=false"]
    if ensemble is not None:
        data_dir.mkdir(parents=True, exist_ok=True)
        (data_dir / "myid").write_text(f"{ensemble.my_id}\n")
        lines += ensemble.lines()
    if tls_dir is None:
        lines += [f"clientPort={port}", *([f"clientPortAddress={bind}"] if bind else [])]
    else:
        if probe_port is None:
            raise ValueError("a TLS ZooKeeper needs a loopback probe port")
        lines += [f"clientPort={probe_port}", "clientPortAddress=127.0.0.1", f"secureClientPort={port}",
                  *([f"secureClientPortAddress={bind}"] if bind else []),
                  "serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory",
                  f"ssl.keyStore.location={pem_keystore(tls_dir, conf_dir / 'keystore.pem')}", "ssl.keyStore.type=PEM",
                  "ssl.clientAuth=none"]  # clients authenticate with their digest identity
    path = conf_dir / "zoo.cfg"
    path.write_text("\n".join(lines) + "\n")
    return path


def zookeeper_command(data_dir: Path, port: int, super_digest: str | None = None, tls_dir: Path | None = None,
                      probe_port: int | None = None, conf_dir: Path | None = None,
                      bind: str | None = None, ensemble: Ensemble | None = None) -> list[str]:
    """A ZooKeeper server from PySpark's jars (its configuration written by ``zookeeper_config``): standalone,
    or a member of ``ensemble``. ``super_digest`` (``super:<digest>``, ``commandlog/zkaccess.py``): whoever
    authenticates with it passes every ACL."""
    jars = pyspark_jars()
    if not any(jars.glob("zookeeper-*.jar")):
        raise FileNotFoundError(f"no zookeeper jar in {jars}; pass a ZooKeeper connect string instead")
    digest = [f"-Dzookeeper.DigestAuthenticationProvider.superDigest={super_digest}"] if super_digest else []
    config = zookeeper_config(data_dir, port, tls_dir, probe_port, conf_dir, bind, ensemble)
    main = "org.apache.zookeeper.server." + ("ZooKeeperServerMain" if ensemble is None else "quorum.QuorumPeerMain")
    return jvm_command("FTPIPELINE_ZOOKEEPER_JAVA_OPTIONS", ZOOKEEPER_JAVA_OPTIONS, f"{jars}/*", main, [str(config)],
                       digest)


def srvr(port: int) -> str:
    """What ``srvr`` (the one four-letter word allowed by default) answers on the loopback ``port``; "" when
    nothing answers."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2.0) as s:
            s.sendall(b"srvr")
            reply = b""
            while chunk := s.recv(4096):
                reply += chunk
    except OSError:
        return ""
    return reply.decode(errors="replace")


def mode(reply: str) -> str:
    """``standalone``, ``leader`` or ``follower``, as a ``srvr`` reply says; "" from a server that serves no
    sessions (loading its database, or a member outside a quorum)."""
    modes = [line.split(":", 1)[1].strip() for line in reply.splitlines() if line.startswith("Mode:")]
    return modes[0] if modes else ""


def serving(port: int) -> bool:
    """Whether the server on ``port`` serves sessions, not only listens.

    It accepts connections before its database is loaded and closes them
    until then; a client started in that window waits out its whole
    connect timeout. ``srvr`` reports a ``Mode`` only once it serves.
    """
    return "Mode:" in srvr(port)


class EmbeddedZooKeeper(ServerProcess):
    """Plaintext clients on the loopback interface alone. ``tls_dir``: clients connect over TLS alone
    (``connect`` asks for it), to ``localhost``, the name a test's certificate gives."""

    what, stem, marker = "ZooKeeper", "zookeeper", b"org.apache.zookeeper.server."

    def __init__(self, directory: Path, super_digest: str | None = None, tls_dir: Path | None = None,
                 ensemble: Ensemble | None = None, port: int = 0) -> None:
        super().__init__(directory)
        self.super_digest = super_digest
        self.tls_dir = tls_dir
        self.ensemble = ensemble  # a member serves once a majority of the members run: start them together
        self.port = port
        self.probe_port = 0  # the plaintext port serving() asks: the client port, unless TLS

    @property
    def connect(self) -> str:
        if self.tls_dir is not None:
            return f"localhost:{self.port}?ca={self.tls_dir / 'ca.crt'}"
        return f"127.0.0.1:{self.port}"

    def _answers(self) -> bool:
        return serving(self.probe_port)

    def _address(self) -> dict[str, int]:
        return {"port": self.port, "probe_port": self.probe_port}

    def _readdress(self, address: dict[str, int]) -> None:
        self.port, self.probe_port = int(address["port"]), int(address["probe_port"])

    def start(self, timeout_s: float = 60.0) -> EmbeddedZooKeeper:
        self._reap()
        self.port = self.port or free_port()  # a restart keeps the address its clients know
        self.probe_port = self.probe_port or (free_port() if self.tls_dir is not None else self.port)
        args = zookeeper_command(self.directory / "data", self.port, self.super_digest, self.tls_dir,
                                 self.probe_port, conf_dir=self.directory, bind="127.0.0.1", ensemble=self.ensemble)
        self._launch(args, lambda: serving(self.probe_port), timeout_s)
        return self
