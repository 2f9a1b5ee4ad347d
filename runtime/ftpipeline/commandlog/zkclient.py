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
"""

from __future__ import annotations

from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionClosedError, ConnectionLoss, OperationTimeoutError, SessionExpiredError
from kazoo.retry import KazooRetry, RetryFailedError

# a lost connection is retried every 0.1 -> 0.5 s, forever (kazoo itself gives up on nothing else)
RECONNECT = dict(max_tries=-1, delay=0.1, backoff=1.5, max_delay=0.5, max_jitter=0.1)

# what "ZooKeeper is not reachable now" looks like to a caller; a retry may succeed (a KazooRetry that
# ran out of tries on a lost connection raises RetryFailedError, not the ConnectionLoss behind it)
UNREACHABLE: tuple[type[BaseException], ...] = (ConnectionLoss, ConnectionClosedError, SessionExpiredError,
                                                OperationTimeoutError, RetryFailedError)


def connect(hosts: str, timeout_s: float = 10.0, start_timeout_s: float | None = 30.0) -> KazooClient:
    """A started client (``start_timeout_s=None``: not started) with the reconnect policy above.
    ``timeout_s`` is the session timeout: for a worker, its heartbeat timeout."""
    client = KazooClient(hosts=hosts, timeout=timeout_s, connection_retry=KazooRetry(**RECONNECT))
    if start_timeout_s is not None:
        client.start(timeout=start_timeout_s)
    return client
