"""The default StorageClass, as kind ships one: ``standard``, served by local-path-provisioner.

Pipelines claim their volumes without naming a class, and a multi-node
cluster needs ReadWriteMany for them. local-path-provisioner allows every
access mode when its volumes live on a ``sharedFileSystemPath`` (a filesystem
every node mounts, trivially true on one node), so both providers configure it
that way: the local one here, kind by patching the ConfigMap kind ships.

Locally the provisioner runs as a node process with the admin kubeconfig. It
reads its config and the helper pod template from the ``local-path-config``
ConfigMap; the helper pods that create and delete volume directories run the
project image (there is no registry) as root, so they may write below the host
path, and make each directory mode 0777, so that pods running as the image's
uid 10001 can write to it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

NAMESPACE = "local-path-storage"
CONFIGMAP = "local-path-config"
SERVICE_ACCOUNT = "local-path-provisioner-service-account"
PROVISIONER = "rancher.io/local-path"
CLASS = "standard"

SETUP = '#!/bin/sh\nset -eu\nmkdir -m 0777 -p "$VOL_DIR"\n'
TEARDOWN = '#!/bin/sh\nset -eu\nrm -rf "$VOL_DIR"\n'


def shared_config(data_dir: str) -> str:
    """The provisioner's config.json: every volume below one path that all nodes share."""
    return json.dumps({"sharedFileSystemPath": data_dir, "nodePathMap": []})


def _helper_pod(image: str) -> dict[str, Any]:
    # the container name is fixed: the provisioner reads the helper's log by it
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "helper-pod"},
            "spec": {"containers": [{"name": "helper-pod", "image": image, "imagePullPolicy": "Never",
                                     "securityContext": {"runAsUser": 0}}]}}


def manifest(data_dir: Path, helper_image: str) -> str:
    """The objects the local provisioner needs, as a kubectl-applicable List (JSON)."""
    items: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "automountServiceAccountToken": False,
         "metadata": {"name": SERVICE_ACCOUNT, "namespace": NAMESPACE}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": CONFIGMAP, "namespace": NAMESPACE},
         "data": {"config.json": shared_config(str(data_dir)), "setup": SETUP, "teardown": TEARDOWN,
                  "helperPod.yaml": json.dumps(_helper_pod(helper_image), indent=2)}},
        {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
         "metadata": {"name": CLASS, "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
         "provisioner": PROVISIONER, "volumeBindingMode": "WaitForFirstConsumer", "reclaimPolicy": "Delete"},
    ]
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": items}, indent=2)


def command(binary: Path, kubeconfig: Path, health_port: int) -> list[str | Path]:
    """The provisioner's command line, out of cluster: config and helper template (with its image) come from
    the ConfigMap."""
    return [binary, "start", "--kubeconfig", kubeconfig, "--namespace", NAMESPACE, "--configmap-name", CONFIGMAP,
            "--provisioner-name", PROVISIONER, "--service-account-name", SERVICE_ACCOUNT,
            "--health-port", str(health_port)]  # /health and /ready; it takes no address, only a port  # /health and /ready; it takes no address, only a port
