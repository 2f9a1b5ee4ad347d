"""SidecarClient: a call nobody answers is ``Unreachable``; an error the worker answered with is not."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pyarrow.flight as flight
import pytest

from ftpipeline.embedded.ports import free_port
from ftpipeline.worker.transport import SidecarClient, Unreachable, call_each


class Refusing(flight.FlightServerBase):  # type: ignore[misc]
    """Answers every action with an error, as a sidecar does when the action itself fails."""

    def do_action(self, context: flight.ServerCallContext, action: flight.Action) -> Iterator[bytes]:
        raise flight.FlightServerError(f"no such action: {action.type}")


def test_a_call_to_a_worker_that_is_gone_raises_unreachable_naming_address_and_action() -> None:
    address = f"127.0.0.1:{free_port()}"  # nothing listens there: a process that was just killed
    with pytest.raises(Unreachable) as caught:
        SidecarClient(address).call("checkpoint", {"epoch": 3}, timeout_s=2)
    assert caught.value.address == address and caught.value.action == "checkpoint"
    assert address in str(caught.value) and "'checkpoint'" in str(caught.value)
    assert isinstance(caught.value, ConnectionError)


def test_an_error_the_worker_answers_with_is_not_unreachable() -> None:
    server = Refusing(f"grpc://127.0.0.1:{free_port()}")
    thread = threading.Thread(target=server.serve, daemon=True)
    thread.start()
    try:
        client = SidecarClient(f"127.0.0.1:{server.port}")
        with pytest.raises(flight.FlightError) as caught:
            client.call("nonsense", timeout_s=5)
        assert not isinstance(caught.value, Unreachable)
        assert "no such action: nonsense" in str(caught.value)
        client.close()
    finally:
        server.shutdown()


class Meeting:
    """A client whose call returns only once every other client's call has begun: serial calls never meet."""

    def __init__(self, barrier: threading.Barrier, fail: bool = False) -> None:
        self.barrier, self.fail = barrier, fail

    def call(self, action: str, body: dict[str, object] | None = None, timeout_s: float | None = None) -> str:
        self.barrier.wait(timeout=10)
        if self.fail:
            raise Unreachable("127.0.0.1:1", action, ConnectionRefusedError("refused"))
        return f"{action} done"


def test_call_each_calls_every_worker_at_once_and_returns_each_answer_or_exception() -> None:
    barrier = threading.Barrier(4)
    clients = {f"w{i}": Meeting(barrier, fail=i == 2) for i in range(4)}
    answers = call_each(clients, "step")  # type: ignore[arg-type]
    assert [answers[f"w{i}"] for i in (0, 1, 3)] == ["step done"] * 3
    assert isinstance(answers["w2"], Unreachable)
