"""The NetworkPolicy of a pipeline's workers: who may reach a worker over the pod network.

A worker's Flight port serves its buffered outputs and the coordinator's
actions. Mutual TLS already refuses a caller without the pipeline's
certificate (``ftpipeline/worker/tls.py``); the policy refuses the connection
itself, so a pod that is neither this pipeline's worker nor the operator
never gets to a handshake. What it allows:

- the Flight port from the same pipeline's workers (peers fetch objects)
  and from the operator's pods (the coordinator runs there);
- the metrics port from anywhere: Prometheus runs wherever the cluster
  keeps it, and ``/metrics`` carries no data or credential.

Egress is left open, as the pipeline's sources and sinks (an object store,
a database) are the cluster's to know. The chart's Redis and ZooKeeper have
policies of their own (``charts/ftpipeline/templates/networkpolicy.yaml``).

The operator names its own pods through ``FTPIPELINE_OPERATOR_NAMESPACE`` and
``FTPIPELINE_OPERATOR_LABELS`` (JSON), which the chart sets; without them it
renders no policy, since it could not let itself in.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ftpipeline_operator.render import FLIGHT_PORT, METRICS_PORT, PIPELINE_LABEL, Obj, object_meta


@dataclass(frozen=True)
class OperatorPods:
    namespace: str
    labels: Mapping[str, str]

    @staticmethod
    def from_env(env: Mapping[str, str] = os.environ) -> OperatorPods | None:
        namespace, labels = env.get("FTPIPELINE_OPERATOR_NAMESPACE"), env.get("FTPIPELINE_OPERATOR_LABELS")
        if not namespace or not labels:
            return None
        return OperatorPods(namespace, dict(json.loads(labels)))


def policy_name(name: str) -> str:
    return f"{name}-workers"


def worker_policy(body: Mapping[str, Any], operator: OperatorPods) -> Obj:
    name = body["metadata"]["name"]
    workers: dict[str, Any] = {"matchLabels": {PIPELINE_LABEL: name, "app.kubernetes.io/component": "worker"}}
    return {
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": object_meta(body, policy_name(name), "worker"),
        "spec": {
            "podSelector": workers,
            "policyTypes": ["Ingress"],
            "ingress": [
                {"ports": [{"protocol": "TCP", "port": FLIGHT_PORT}],
                 "from": [{"podSelector": workers},
                          {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": operator.namespace}},
                           "podSelector": {"matchLabels": dict(operator.labels)}}]},
                {"ports": [{"protocol": "TCP", "port": METRICS_PORT}]},
            ],
        },
    }
