"""One way to connect to Redis, with a retry policy that waits out a restart and says so.

A Redis restart (or a moment out of reach) must not kill a coordinator or a
sidecar with a ConnectionError: every command is tried again by
:class:`OutageRetry` — a redis-py ``Retry`` policy object with a capped
exponential backoff, forever — and the first failure and the first success
after it are reported (``on_down``/``on_up``: the coordinator's
``ControlPlane`` turns them into a log line, a metric, a condition).

Retrying is safe for what the runtime sends: the lineage scripts are
idempotent where a reply can be lost (a completion recorded twice finds its
task gone from NTT and records nothing), counters may count a retried
increment twice, and messages in the inbox are handled idempotently.

What a retry cannot bring back is data a Redis without persistence lost in
its restart: that is seen from the generation marker (``control/store.py``)
and answered by a rollback (``coordinator/losses.py``).
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable
from typing import Any

import redis
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

log = logging.getLogger("ftpipeline.redis")

UNREACHABLE: tuple[type[Exception], ...] = (RedisConnectionError, RedisTimeoutError, socket.timeout)


class OutageRetry(Retry):
    """Every command tried again every 50 ms -> 1 s, forever; ``on_down``/``on_up`` told of an outage."""

    def __init__(self, on_down: Callable[[Exception], None] | None = None,
                 on_up: Callable[[], None] | None = None, between: Callable[[], None] | None = None) -> None:
        super().__init__(ExponentialBackoff(cap=1.0, base=0.05), -1, UNREACHABLE)
        self.on_down = on_down
        self.on_up = on_up
        self.between = between  # called before every new try: may raise to give up (a stop request)

    def call_with_retry(self, do: Callable[[], Any], fail: Callable[..., Any],
                        is_retryable: Callable[[Exception], bool] | None = None,
                        with_failure_count: bool = False) -> Any:
        failed = False

        def failing(error: Exception, *more: Any) -> Any:
            nonlocal failed
            if not failed and self.on_down is not None:
                self.on_down(error)
            failed = True
            result = fail(error, *more)
            if self.between is not None:
                self.between()
            return result

        result = super().call_with_retry(do, failing, is_retryable, with_failure_count)
        if failed and self.on_up is not None:
            self.on_up()
        return result


COMMAND_TIMEOUT_S = 15.0  # no command the runtime sends takes this long: longer is a connection into nothing
CONNECT_TIMEOUT_S = 5.0


def connect(url: str, **options: Any) -> redis.Redis:
    """A client whose commands wait out an outage (see :class:`OutageRetry`).

    Every command has a deadline: when a Redis pod is deleted, a connection made to it while it went
    (through the Service, before its endpoint was removed) gets no reset once its network is gone, and
    a command on it, or a connect, waited for TCP's own give-up (minutes) while the rest of the run went
    on. A timed-out command is an outage like a refused connection: tried again, on a new connection."""
    options.setdefault("socket_timeout", COMMAND_TIMEOUT_S)
    options.setdefault("socket_connect_timeout", CONNECT_TIMEOUT_S)
    if not url.startswith("unix:"):
        options.setdefault("socket_keepalive", True)
    return redis.Redis.from_url(url, retry=OutageRetry(), **options)


def watch(client: redis.Redis, on_down: Callable[[Exception], None], on_up: Callable[[], None],
          between: Callable[[], None] | None = None) -> None:
    """Tell ``on_down``/``on_up`` of ``client``'s outages (a client from :func:`connect`); ``between``
    runs before each new try and may raise to stop waiting. redis-py copies a policy into every
    connection, so the reporting one replaces it everywhere."""
    if isinstance(client.get_retry(), OutageRetry):
        client.set_retry(OutageRetry(on_down, on_up, between))


def reachable(url: str, timeout_s: float = 10.0) -> None:
    """Raise ConnectionError unless Redis answers now: a run does not start waiting on a Redis that
    was never there (a wrong address is a failed attempt, not a pause)."""
    probe = redis.Redis.from_url(url, socket_connect_timeout=timeout_s, socket_timeout=timeout_s)
    try:
        probe.ping()
    finally:
        probe.close()
