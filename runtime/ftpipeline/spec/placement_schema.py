"""Where a pipeline's worker pods may run, and how many a voluntary disruption may take at once.

A node that dies takes every worker on it; a drain evicts them. So the
fields a platform engineer sets on any workload are here, with the Pod's
own names and meaning (they are copied into each worker pod as they are):
``nodeSelector``, ``tolerations``, ``affinity``, ``priorityClassName`` and
``topologySpreadConstraints``. Without ``topologySpreadConstraints`` the
workers are spread over nodes by default (``maxSkew`` 1 on
``kubernetes.io/hostname``, a preference: on one node they all still run);
an empty list turns that off. ``disruptionBudget`` is the
PodDisruptionBudget the operator keeps per pipeline: a drain evicts at
most ``maxUnavailable`` workers at a time. ``ftpipeline run`` ignores all
of these.
"""

from __future__ import annotations

from ftpipeline.spec.nodes import Schema, integer, obj, string


def _pod_field(description: str, kind: str) -> Schema:
    """A field with the Pod API's own schema, validated by the API server when the pod is created."""
    if kind == "array":
        return {"type": "array", "maxItems": 32, "description": description,
                "items": {"type": "object", "description": "One item, as in a Pod.",
                          "x-kubernetes-preserve-unknown-fields": True}}
    return {"type": "object", "description": description, "x-kubernetes-preserve-unknown-fields": True}


PLACEMENT_FIELDS: Schema = {
    "nodeSelector": {
        "type": "object", "description": "Node labels a worker pod's node must have, as in a Pod.",
        "additionalProperties": {"type": "string"},
    },
    "tolerations": _pod_field("Taints the worker pods tolerate, as in a Pod.", "array"),
    "affinity": _pod_field("Node and pod (anti-)affinity of the worker pods, as in a Pod.", "object"),
    "priorityClassName": string("PriorityClass of the worker pods."),
    "topologySpreadConstraints": _pod_field(
        "How the worker pods spread over topology domains, as in a Pod. Unset: over nodes "
        "(kubernetes.io/hostname, maxSkew 1, whenUnsatisfiable ScheduleAnyway); [] spreads none.", "array"),
    "disruptionBudget": obj(
        "The PodDisruptionBudget of the worker pods (a drain evicts this many at a time, each handed over "
        "before the next goes).",
        {"maxUnavailable": integer("Worker pods a voluntary disruption may take at once.", minimum=1, default=1)}),
}
