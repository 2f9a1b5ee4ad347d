"""The objects a pipeline owns (its ConfigMap, Service, PodDisruptionBudget, NetworkPolicy), written in one
request each, at once.

Each attempt of a pipeline applies them first (``runner.py``; in a burst of
creations, hundreds at once, on the coordinator threads), so what it spends
waiting on the API server delays the pipeline's start and its status. Three
things keep that wait short:

- **server-side apply**: one PATCH creates or updates an object, where a
  create answered 409 then a patch took two round trips (the common case at
  an operator's start, when every object exists already);
- **at once**: the objects of one pipeline are sent side by side, so the
  handler waits for the slowest, not for their sum;
- **not again**: an object this process applied with the same content is not
  sent again (a spec change that leaves the Service as it was sends no
  Service); a restarted operator applies each once.

The operator is the only field manager of these objects, so a conflict (a
field someone else set) is taken over (``force``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

from kubernetes import client

from ftpipeline_operator.render import digest

FIELD_MANAGER = "ftpipeline-operator"
APPLY = "application/apply-patch+yaml"  # JSON is YAML: the body goes as the client serialises it

Obj = Mapping[str, Any]


class OwnedObjects:
    """Applies a pipeline's objects through ``send`` (one call per object), remembering what went out."""

    def __init__(self, send: Callable[[Obj], None], threads: int = 16) -> None:
        self._send = send
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="apply")
        self._sent: dict[tuple[str, str, str], str] = {}
        self._lock = threading.Lock()

    def apply(self, objs: Iterable[Obj]) -> int:
        """Send each object not sent unchanged before; wait for all; the first failure is raised (the
        handler is retried by Kopf). Returns how many were sent."""
        todo = []
        for obj in objs:
            key, value = _key(obj), digest(obj)
            with self._lock:
                if self._sent.get(key) == value:
                    continue
            todo.append((obj, key, value))
        futures = [(self._pool.submit(self._send, obj), key, value) for obj, key, value in todo]
        error: BaseException | None = None
        for future, key, value in futures:
            try:
                future.result()
            except BaseException as exc:  # every one is waited for before the first error is raised
                error = error or exc
                continue
            with self._lock:
                self._sent[key] = value
        if error is not None:
            raise error
        return len(futures)

    def forget(self, namespace: str, name: str) -> None:
        """A deleted pipeline's objects go with it (owner references): a new one of that name sends all."""
        with self._lock:
            for key in [k for k in self._sent if k[0] == namespace and k[1].startswith(f"{name}-")]:
                del self._sent[key]


def _key(obj: Obj) -> tuple[str, str, str]:
    return obj["metadata"]["namespace"], obj["metadata"]["name"], obj["kind"]


def server_side_apply(core: client.CoreV1Api) -> Callable[[Obj], None]:
    """One server-side apply request per object, by the operator's field manager."""
    net = client.NetworkingV1Api(core.api_client)
    patch: dict[str, Callable[..., Any]] = {
        "ConfigMap": core.patch_namespaced_config_map,
        "Service": core.patch_namespaced_service,
        "NetworkPolicy": net.patch_namespaced_network_policy,
        "PodDisruptionBudget": client.PolicyV1Api(core.api_client).patch_namespaced_pod_disruption_budget,
    }

    def send(obj: Obj) -> None:
        meta = obj["metadata"]
        # the answer (the whole object, its managed fields included) is not read into the client's models:
        # that took more of the handler's time than the request; an error status still raises
        answer = patch[obj["kind"]](meta["name"], meta["namespace"], cast(Any, dict(obj)), field_manager=FIELD_MANAGER,
                                    force=True, _content_type=APPLY, _preload_content=False)
        answer.drain_conn()  # read to the end, unparsed: the connection goes back to the pool
        answer.release_conn()

    return send
