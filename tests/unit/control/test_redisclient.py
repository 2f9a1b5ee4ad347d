"""The Redis retry policy: waits out an outage, reports its start and end once, lets a stop through."""

from __future__ import annotations

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from ftpipeline.control.redisclient import OutageRetry


def _flaky(failures: int) -> tuple[list[int], object]:
    calls: list[int] = []

    def do() -> str:
        calls.append(1)
        if len(calls) <= failures:
            raise RedisConnectionError("Connection refused")
        return "PONG"

    return calls, do


def test_an_outage_is_reported_once_and_the_command_succeeds_after_it() -> None:
    events: list[str] = []
    retry = OutageRetry(lambda e: events.append(f"down: {e}"), lambda: events.append("up"),
                        lambda: events.append("between"))
    retry._backoff.compute = lambda failures: 0  # type: ignore[method-assign]  # no real sleeping here
    calls, do = _flaky(3)
    assert retry.call_with_retry(do, lambda error, count: None, with_failure_count=True) == "PONG"
    assert len(calls) == 4
    assert events == ["down: Connection refused", "between", "between", "between", "up"]


def test_no_outage_no_report() -> None:
    events: list[str] = []
    retry = OutageRetry(lambda e: events.append("down"), lambda: events.append("up"))
    _, do = _flaky(0)
    assert retry.call_with_retry(do, lambda error: None) == "PONG" and events == []


def test_a_stop_request_ends_the_wait() -> None:
    class Stop(Exception):
        pass

    def between() -> None:
        raise Stop

    retry = OutageRetry(between=between)
    retry._backoff.compute = lambda failures: 0  # type: ignore[method-assign]
    calls, do = _flaky(100)
    with pytest.raises(Stop):
        retry.call_with_retry(do, lambda error: None)
    assert len(calls) == 1
