"""One way to connect to ZooKeeper, with a reconnect policy that fits heartbeats.

kazoo's default reconnect policy doubles its delay without a useful bound
(0.1 s, 0.2 s, ... 3.2 s, 6.4 s): after a ZooKeeper restart of four seconds a
client tries again only after its session timeout has passed, and the server
has expired the session — every worker "dies" at once. Here a client tries
again every ``RECONNECT.max_delay`` at most, forever, so a session survives
any outage shorter than its timeout, and a longer one ends in a *new*
session (kazoo's LOST, then CONNECTED) that the caller handles
(``peer.py`` re-registers a worker that is still a member).

Every KazooClient of the runtime and the operator comes from :func:`connect`.

A connect string may carry credentials: ``digest://user:password@host:port,...``
authenticates with ZooKeeper's digest scheme, and every znode the client
creates is readable and writable by that identity alone (``zkaccess.py``).
It stays one string, so it travels as the plain form does: a flag, an
environment variable filled from a Secret, a field of the pipeline spec.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, unquote

from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionClosedError, ConnectionLoss, OperationTimeoutError, SessionExpiredError
from kazoo.retry import KazooRetry, RetryFailedError
from kazoo.security import make_digest_acl

# a lost connection is retried every 0.1 -> 0.5 s, forever (kazoo itself gives up on nothing else)
RECONNECT = dict(max_tries=-1, delay=0.1, backoff=1.5, max_delay=0.5, max_jitter=0.1)

# what "ZooKeeper is not reachable now" looks like to a caller; a retry may succeed (a KazooRetry that
# ran out of tries on a lost connection raises RetryFailedError, not the ConnectionLoss behind it)
UNREACHABLE: tuple[type[BaseException], ...] = (ConnectionLoss, ConnectionClosedError, SessionExpiredError,
                                                OperationTimeoutError, RetryFailedError)


DIGEST = "digest://"


def parse(connect_string: str) -> tuple[str, tuple[str, str] | None]:
    """The hosts, and the digest identity (user, password) if the string carries one."""
    if not connect_string.startswith(DIGEST):
        return connect_string, None
    credentials, at, hosts = connect_string[len(DIGEST):].rpartition("@")
    user, colon, password = credentials.partition(":")
    if not at or not colon or not user:
        raise ValueError("a digest:// ZooKeeper connect string is digest://user:password@host:port,...")
    return hosts, (unquote(user), unquote(password))


def with_identity(connect_string: str, user: str, password: str) -> str:
    """``connect_string`` authenticating as ``user`` instead of any identity it has."""
    hosts, _ = parse(connect_string)
    return f"{DIGEST}{quote(user, safe='')}:{quote(password, safe='')}@{hosts}"


def connect(hosts: str, timeout_s: float = 10.0, start_timeout_s: float | None = 30.0) -> KazooClient:
    """A started client (``start_timeout_s=None``: not started) with the reconnect policy above.
    ``timeout_s`` is the session timeout: for a worker, its heartbeat timeout. ``hosts`` may carry a
    digest identity (see the module's docstring)."""
    plain, identity = parse(hosts)
    auth: dict[str, Any] = {}
    if identity is not None:
        user, password = identity
        auth = {"auth_data": [("digest", f"{user}:{password}")],
                "default_acl": [make_digest_acl(user, password, all=True)]}
    client = KazooClient(hosts=plain, timeout=timeout_s, connection_retry=KazooRetry(**RECONNECT), **auth)
    if start_timeout_s is not None:
        client.start(timeout=start_timeout_s)
    return client
