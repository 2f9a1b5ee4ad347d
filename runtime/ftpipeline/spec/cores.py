"""How many cores a worker's Spark runs on, when the pipeline does not say.

A worker's Spark is a local session: ``local[N]`` runs N task threads, and
the shuffle of a step's query has N partitions (``worker/executor.py``). N is
what the worker is given, the way a Spark executor's cores follow its pod:

- on Kubernetes, the spark container's CPU limit, else its request, rounded
  up (a pod with neither gets one: nothing says it may use more);
- with ``ftpipeline run``, the cores this process may use, divided among the
  pipeline's workers, which share the machine.

``spec.spark.master`` set by the pipeline wins; any master but ``local[...]``
(a cluster of Spark's own) is passed through.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from typing import Any

_LOCAL = re.compile(r"^local\[(\d+)\]$")


def local_master(cores: int) -> str:
    return f"local[{max(1, cores)}]"


def cores_of(master: str) -> int:
    """The task threads of a ``local[N]`` master (1 for ``local`` or anything else)."""
    found = _LOCAL.match(master)
    return int(found.group(1)) if found else 1


def machine_cores() -> int:
    """Cores this process may run on (its CPU affinity, which a container's cpuset narrows)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def master_for_process(master: str, workers: int, cores: int | None = None) -> str:
    """``ftpipeline run``: the pipeline's master, or the machine's cores shared by its workers."""
    return master or local_master((cores if cores is not None else machine_cores()) // max(1, workers))


def cpu_quantity(value: Any) -> float:
    """A Kubernetes CPU quantity as cores: ``2``, ``1.5``, ``500m``."""
    text = str(value).strip()
    if text.endswith("m"):
        return int(text[:-1]) / 1000
    return float(text)


def master_for_pod(master: str, resources: Mapping[str, Any]) -> str:
    """On Kubernetes: the pipeline's master, or the spark container's CPU limit (else request), rounded up."""
    if master:
        return master
    for kind in ("limits", "requests"):
        cpu = (resources.get(kind) or {}).get("cpu")
        if cpu is not None:
            try:
                return local_master(math.ceil(cpu_quantity(cpu)))
            except ValueError:  # not a CPU quantity: the API server refuses the pod and names the field
                break
    return local_master(1)
