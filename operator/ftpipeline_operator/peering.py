"""Several operator replicas, one active: Kopf's peering, with the oldest replica first.

Kopf's peering (a ``ClusterKopfPeering`` object the chart creates) lets each
operator publish itself with a priority; one that sees a live peer of higher
priority pauses: it stops watching and stops every daemon, so its
coordinators stop, keeping their pods. Equal priorities pause everyone, so
each replica takes the time it started as its priority, older first (a tie
broken at random): a replica that the Deployment adds later never pushes the
active one aside, it stands by.

    STANDBY --the active one's record is gone (it exited: removed at once) or out of date
              (it died: ``FTPIPELINE_PEERING_LIFETIME_S``)--> ACTIVE: daemons start, every pipeline
              resumes (its pods of the old run replaced, its command log claimed)
    ACTIVE  --an older live peer appears (after a partition)--> STANDBY

Peering alone cannot stop a replica that is cut off from the API server but
still runs its coordinators; that one is fenced where its decisions land:
the standby's coordinators claim each pipeline's command log, and the old
ones' next appends are refused (``commandlog/zklog.py``).

Without ``FTPIPELINE_PEERING`` (one replica, ``kopf run --standalone``) none
of this runs.
"""

from __future__ import annotations

import logging
import os
import random
import time

from typing import Any

import kopf
from kubernetes import client

from ftpipeline_operator import owners

log = logging.getLogger("ftpipeline.operator.peering")
EPOCH_END = 4_000_000_000  # seconds: any start time before it gives a positive priority
TIE_BREAK = 1000


def priority(started_at: float, tie: int) -> int:
    """Higher for an operator that started earlier; two that started in the same second differ by ``tie``."""
    return (EPOCH_END - int(started_at)) * TIE_BREAK + tie % TIE_BREAK


def ensure_peering_object(custom: client.CustomObjectsApi, name: str, owner: dict[str, Any] | None = None) -> None:
    """Kopf publishes peers in an existing object; the first replica that starts makes it, owned by
    ``owner`` (``owners.py``: removed with the release). One made before it had an owner gets it."""
    meta: dict[str, Any] = {"name": name}
    if owner is not None:
        meta["ownerReferences"] = [owner]
    body = {"apiVersion": "kopf.dev/v1", "kind": "ClusterKopfPeering", "metadata": meta}
    try:
        custom.create_cluster_custom_object("kopf.dev", "v1", "clusterkopfpeerings", body)
        return
    except client.exceptions.ApiException as exc:
        if exc.status != 409:
            raise
    if owner is not None:
        existing: Any = custom.get_cluster_custom_object("kopf.dev", "v1", "clusterkopfpeerings", name)
        if not existing.get("metadata", {}).get("ownerReferences"):
            custom.patch_cluster_custom_object("kopf.dev", "v1", "clusterkopfpeerings", name,
                                               {"metadata": {"ownerReferences": [owner]}},
                                               _content_type="application/merge-patch+json")


def configure(settings: kopf.OperatorSettings, custom: client.CustomObjectsApi) -> None:
    name = os.environ.get("FTPIPELINE_PEERING", "")
    if not name:
        settings.peering.standalone = True
        return
    ensure_peering_object(custom, name, owners.release_cluster_role())
    settings.peering.standalone = False
    settings.peering.mandatory = True
    settings.peering.clusterwide = True
    settings.peering.name = name
    settings.peering.lifetime = int(os.environ.get("FTPIPELINE_PEERING_LIFETIME_S", "15"))
    settings.peering.priority = priority(time.time(), random.randrange(TIE_BREAK))
    log.info("peering", extra={"peering": name, "priority": settings.peering.priority,
                               "lifetime_s": settings.peering.lifetime})
