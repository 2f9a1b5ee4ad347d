"""What an FTPipeline may put into its worker pods: the cluster's policy, set by whoever installs the chart.

Whoever may create an FTPipeline in a namespace gets pods that run their
code there. Without a bound, that is more than the namespace's own Pod
rules would give them: a hostPath volume mounts the node, and a
``serviceAccountName`` borrows whatever that account may do in the API.
So the chart decides, not the pipeline's author:

- ``volumeTypes``: the volume sources ``spec.volumes`` may use. The
  default is the Pod Security Standard ``restricted`` list without
  ``secret`` and ``projected`` (a worker runs user code, which would read a
  mounted Secret); ``hostPath`` is allowed only by listing it.
- ``serviceAccounts``: the accounts ``spec.serviceAccountName`` may name.
  Empty (the default): none, and worker pods run under the namespace's
  ``default`` account with no API token mounted.

Nothing else in the spec reaches a pod's security settings: the operator
renders both containers non-root, without privilege escalation, with every
capability dropped and a read-only root filesystem (``render.py``), and
the schema has no field that changes that.

The same check runs twice: in the validating webhook, so a violating
object is never stored (``admission.py``), and before each run, so one
stored while the webhook was not installed fails with a condition naming
the field instead of starting.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kubernetes import client

from ftpipeline.spec.load import Problem

# Pod Security Standard "restricted" volume types, less secret and projected
DEFAULT_VOLUME_TYPES = ("configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim")
_VOLUME_KEYS = frozenset({"name"})  # a volume's keys other than its one source


# every volume source a Pod knows (hostPath, persistentVolumeClaim, ...), as the API names them
VOLUME_TYPES = (frozenset(client.V1Volume.attribute_map.values()) | {"image"}) - _VOLUME_KEYS  # image: 1.31+


def unknown_volume_type(source: str) -> str:
    """A volume source no Pod has, with the nearest one a Pod has (case is the commonest slip: hostpath)."""
    by_lower = {t.lower(): t for t in VOLUME_TYPES}
    near = [by_lower[m] for m in difflib.get_close_matches(source.lower(), by_lower, n=1, cutoff=0.6)]
    hint = f" (did you mean {near[0]}?)" if near else f" (a Pod's volume types: {', '.join(sorted(VOLUME_TYPES))})"
    return f"unknown volume type {source!r}{hint}"


@dataclass(frozen=True)
class Policy:
    volume_types: frozenset[str] = frozenset(DEFAULT_VOLUME_TYPES)
    service_accounts: frozenset[str] = frozenset()

    @staticmethod
    def from_env(env: Mapping[str, str] = os.environ) -> Policy:
        """``FTPIPELINE_ALLOWED_VOLUME_TYPES`` and ``FTPIPELINE_ALLOWED_SERVICE_ACCOUNTS``, comma-separated
        (the chart sets both); an unset variable keeps the default, an empty one allows nothing."""
        def names(key: str, default: Sequence[str]) -> frozenset[str]:
            raw = env.get(key)
            return frozenset(default) if raw is None else frozenset(n.strip() for n in raw.split(",") if n.strip())
        return Policy(names("FTPIPELINE_ALLOWED_VOLUME_TYPES", DEFAULT_VOLUME_TYPES),
                      names("FTPIPELINE_ALLOWED_SERVICE_ACCOUNTS", ()))


def problems(spec: Mapping[str, Any], policy: Policy) -> list[Problem]:
    """Each field of ``spec`` the policy refuses, named as ``kubectl`` would name it."""
    found: list[Problem] = []
    for i, volume in enumerate(spec.get("volumes") or []):
        if not isinstance(volume, Mapping):
            continue  # the schema reports it
        for source in sorted(set(volume) - _VOLUME_KEYS):
            if source not in VOLUME_TYPES:
                found.append(Problem(f"spec.volumes[{i}].{source}", unknown_volume_type(source)))
            elif source not in policy.volume_types:
                allowed = ", ".join(sorted(policy.volume_types)) or "none"
                found.append(Problem(f"spec.volumes[{i}].{source}",
                                     f"volume type {source} is not allowed by the operator's policy (allowed: {allowed})"))
    account = spec.get("serviceAccountName")
    if account and account not in policy.service_accounts:
        allowed = ", ".join(sorted(policy.service_accounts)) or "none: workers run without an API token"
        found.append(Problem("spec.serviceAccountName",
                             f"service account {account!r} is not allowed by the operator's policy (allowed: {allowed})"))
    return found
