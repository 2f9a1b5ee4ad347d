"""One way to connect to ZooKeeper, with a reconnect policy that fits heartbeats.

kazoo's default reconnect policy doubles its delay without a useful bound
(0.1 s, 0.2 s, ... 3.2 s, 6.4 s): after a ZooKeeper restart of four seconds a
client tries again only after its session timeout has passed, and the server
has expired the session — every worker "dies" at once. Here a client tries
again every ``RECONNECT.max_delay`` at most, forever, so a session survives
any outage shorter than its timeout, and a longer one ends in a *new*
session (kazoo's LOST, then CONNECTED) that the caller handles
(``peer.py`` re-registers a worker that is still a member).

A member of an ensemble that goes silent (its machine lost: no reset, no
answer) is noticed by kazoo only when a ping goes unanswered for two thirds
of the session timeout (6.7 s of a 10 s session), and every request sent
meanwhile waits. Here each connection's socket also gives up when data it
sent stays unacknowledged for ``SILENT_SERVER_MS`` (Linux's
``TCP_USER_TIMEOUT``): the first request or ping after the loss ends the
connection that soon, and kazoo moves the same session to another member.
The session itself is untouched (it lives in the ensemble, not the socket).

Every KazooClient of the runtime and the operator comes from :func:`connect`.

A connect string may carry credentials: ``digest://user:password@host:port,...``
authenticates with ZooKeeper's digest scheme, and every znode the client
creates is readable and writable by that identity alone (``zkaccess.py``).
It stays one string, so it travels as the plain form does: a flag, an
environment variable filled from a Secret, a field of the pipeline spec.

It may also ask for TLS: ``host:port,...?ca=/path/ca.crt`` connects to the
servers' secure client port and trusts the servers whose certificate that
CA signed and names the host (as ``rediss://...?ssl_ca_certs=`` does for
Redis). The CA is a file path, so the string stays short and free of key
material; on Kubernetes the operator mounts the file at the same path in
every pipeline's sidecar.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, quote, unquote

from kazoo.client import KazooClient
from kazoo.handlers.threading import SequentialThreadingHandler
from kazoo.exceptions import ConnectionClosedError, ConnectionLoss, OperationTimeoutError, SessionExpiredError
from kazoo.retry import KazooRetry, RetryFailedError
from kazoo.security import make_digest_acl

# a lost connection is retried every 0.1 -> 0.5 s, forever (kazoo itself gives up on nothing else)
RECONNECT = dict(max_tries=-1, delay=0.1, backoff=1.5, max_delay=0.5, max_jitter=0.1)

# what "ZooKeeper is not reachable now" looks like to a caller; a retry may succeed (a KazooRetry that
# ran out of tries on a lost connection raises RetryFailedError, not the ConnectionLoss behind it)
UNREACHABLE: tuple[type[BaseException], ...] = (ConnectionLoss, ConnectionClosedError, SessionExpiredError,
                                                OperationTimeoutError, RetryFailedError)


# a server that has acknowledged nothing of what was sent to it for this long is gone (a kernel acknowledges
# within milliseconds even when the server process is busy: only a lost machine or network is this silent)
SILENT_SERVER_MS = 1500


class _Handler(SequentialThreadingHandler):  # type: ignore[misc]
    """kazoo's threading handler, its sockets closed by the kernel once a server goes silent."""

    def create_connection(self, *args: Any, **kwargs: Any) -> socket.socket:
        sock: socket.socket = super().create_connection(*args, **kwargs)
        if hasattr(socket, "TCP_USER_TIMEOUT"):  # Linux
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, SILENT_SERVER_MS)
        return sock


DIGEST = "digest://"
OPTIONS = ("ca",)  # what a connect string's ?query may set


@dataclass(frozen=True)
class ConnectString:
    hosts: str                             # host:port,...[/chroot], as kazoo takes it
    identity: tuple[str, str] | None = None  # digest (user, password)
    ca: str | None = None                  # TLS, trusting this CA file

    def __str__(self) -> str:
        head = ""
        if self.identity is not None:
            user, password = self.identity
            head = f"{DIGEST}{quote(user, safe='')}:{quote(password, safe='')}@"
        return f"{head}{self.hosts}" + (f"?ca={quote(self.ca, safe='/')}" if self.ca else "")


def parse_connect(connect_string: str) -> ConnectString:
    """The parts of a connect string (see the module's docstring); a malformed one is a ValueError naming
    what is wrong, never a connection attempt to a wrong host."""
    rest, question, query = connect_string.partition("?")
    ca = None
    if question:
        options = parse_qs(query, keep_blank_values=True, strict_parsing=True)
        unknown = sorted(set(options) - set(OPTIONS))
        if unknown:
            raise ValueError(f"ZooKeeper connect string: unknown option {', '.join(unknown)} (known: {', '.join(OPTIONS)})")
        ca = options["ca"][-1]
        if not ca:
            raise ValueError("ZooKeeper connect string: ?ca= names no file")
    if not rest.startswith(DIGEST):
        return ConnectString(rest, None, ca)
    credentials, at, hosts = rest[len(DIGEST):].rpartition("@")
    user, colon, password = credentials.partition(":")
    if not at or not colon or not user:
        raise ValueError("a digest:// ZooKeeper connect string is digest://user:password@host:port,...")
    return ConnectString(hosts, (unquote(user), unquote(password)), ca)


def parse(connect_string: str) -> tuple[str, tuple[str, str] | None]:
    """The hosts, and the digest identity (user, password) if the string carries one."""
    parts = parse_connect(connect_string)
    return parts.hosts, parts.identity


def with_identity(connect_string: str, user: str, password: str) -> str:
    """``connect_string`` authenticating as ``user`` instead of any identity it has (its TLS kept)."""
    parts = parse_connect(connect_string)
    return str(ConnectString(parts.hosts, (user, password), parts.ca))


def connect(hosts: str, timeout_s: float = 10.0, start_timeout_s: float | None = 30.0,
            client_id: tuple[int, bytes] | None = None) -> KazooClient:
    """A started client (``start_timeout_s=None``: not started) with the reconnect policy above.
    ``timeout_s`` is the session timeout: for a worker, its heartbeat timeout. ``hosts`` may carry a
    digest identity (see the module's docstring)."""
    parts = parse_connect(hosts)
    options: dict[str, Any] = {}
    if parts.identity is not None:
        user, password = parts.identity
        options = {"auth_data": [("digest", f"{user}:{password}")],
                   "default_acl": [make_digest_acl(user, password, all=True)]}
    if parts.ca is not None:
        options.update(use_ssl=True, ca=parts.ca, verify_certs=True, check_hostname=True)
    if client_id is not None:  # a session of another client (fault injection: closing it expires theirs)
        options["client_id"] = client_id
    client = KazooClient(hosts=parts.hosts, timeout=timeout_s, connection_retry=KazooRetry(**RECONNECT),
                         handler=_Handler(), **options)
    if start_timeout_s is not None:
        client.start(timeout=start_timeout_s)
    return client
