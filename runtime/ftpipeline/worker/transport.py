"""Arrow Flight between workers, and between the coordinator and workers.

One Flight server per worker (in its sidecar) carries both kinds of traffic:

- data: ``do_get(object name)`` streams a buffered object as Arrow record
  batches to the worker whose task needs it;
- control: ``do_action(name, json)`` for the coordinator's calls (``state``,
  ``create``, ``step``, ``wake``, ``release``, ``shutdown``) and for the
  local Spark process (``hello``, ``next_task``, ``task_done``,
  ``task_failed``).

Actions carry small JSON documents; objects never go through JSON. A call
meant for every worker goes to all of them at once (``call_each``).

A call that gets no answer (the worker's process or pod is gone, stopped, or
cut off) raises :class:`Unreachable`, not one of Flight's transport errors:
to the coordinator that is a loss the detection protocol will confirm, while
an error the worker *answered* with is a fault of the call itself.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.flight as flight

from ftpipeline.worker.tls import Credentials


# gRPC's words for "nobody answered": refused, reset, timed out, or cancelled on the way
_NO_ANSWER = (flight.FlightUnavailableError, flight.FlightTimedOutError, flight.FlightCancelledError, OSError)


class Unreachable(ConnectionError):
    """A worker did not answer a call: it is gone, stopped or cut off (a loss, once detection confirms it)."""

    def __init__(self, address: str, action: str, cause: BaseException) -> None:
        first = str(cause).strip().splitlines()[0] if str(cause).strip() else type(cause).__name__
        super().__init__(f"{address} did not answer {action!r}: {first}")
        self.address = address
        self.action = action


class SidecarClient:
    """A connection to one sidecar: ``host:port`` of its network listener, with the pipeline's
    ``credentials`` (mutual TLS, ``tls.py``) when it has them, or a full location (the Spark
    process's ``grpc+unix://`` socket)."""

    def __init__(self, address: str, timeout_s: float = 30.0, credentials: Credentials | None = None) -> None:
        self.address = address
        self.timeout_s = timeout_s
        if "://" in address:
            location = address
        else:
            location = f"{'grpc+tls' if credentials else 'grpc'}://{address}"
        self._client = flight.FlightClient(location, **(credentials.client_options() if credentials else {}))

    def call(self, action: str, body: dict[str, Any] | None = None, timeout_s: float | None = None) -> Any:
        options = flight.FlightCallOptions(timeout=timeout_s or self.timeout_s)
        payload = json.dumps(body or {}).encode()
        try:
            results = list(self._client.do_action(flight.Action(action, payload), options=options))
        except _NO_ANSWER as exc:
            raise Unreachable(self.address, action, exc) from exc
        return json.loads(results[0].body.to_pybytes()) if results else None

    def fetch(self, name: str, timeout_s: float | None = None) -> tuple[pa.Schema, Iterator[pa.RecordBatch]]:
        """The object ``name``: its schema, and its batches as they stream in (an object of a large
        task is never held whole). A refused or failed request raises here, before any batch."""
        options = flight.FlightCallOptions(timeout=timeout_s or self.timeout_s)
        reader = self._client.do_get(flight.Ticket(name.encode()), options=options)
        return reader.schema, (chunk.data for chunk in reader)

    def close(self) -> None:
        self._client.close()


K = TypeVar("K")
_FAN_OUT = ThreadPoolExecutor(max_workers=16, thread_name_prefix="call-each")


def call_each(clients: Mapping[K, SidecarClient], action: str, body: dict[str, Any] | None = None,
              timeout_s: float | None = None) -> dict[K, Any]:
    """Call ``action`` on every client at once: each one's answer, or the exception its call raised."""
    def one(client: SidecarClient) -> Any:
        try:
            return client.call(action, body, timeout_s=timeout_s)
        except Exception as exc:
            return exc

    if len(clients) <= 1:
        return {k: one(c) for k, c in clients.items()}
    return dict(zip(clients, _FAN_OUT.map(one, clients.values())))
