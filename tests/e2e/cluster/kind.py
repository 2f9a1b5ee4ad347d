"""The kind provider: where Docker and kind exist, a kind cluster with the project image loaded.

The image is built from the same Dockerfile with ``docker build`` (base
``debian:bookworm-slim``) and loaded with ``kind load docker-image``; the
kubeconfig is written where the local provider writes its own, so
``env`` and the tests do not change. kind's default StorageClass ``standard``
(local-path-provisioner) is switched to a shared path so that ReadWriteMany
claims bind, as on the local provider.
"""

from __future__ import annotations

import json
import shutil
import subprocess

from . import storage
from .build import REPO, phase, run
from .config import PROJECT_IMAGE, Paths

NAME = "ftpipeline-e2e"
VOLUMES = "/var/local-path-provisioner"  # where kind's provisioner keeps volumes on its node


def available() -> bool:
    if not (shutil.which("docker") and shutil.which("kind")):
        return False
    return subprocess.run(["docker", "info"], capture_output=True).returncode == 0


class KindCluster:
    def __init__(self, paths: Paths | None = None) -> None:
        self.paths = paths or Paths.from_env()

    def up(self) -> None:
        if not available():
            raise RuntimeError("the kind provider needs docker (with a running engine) and kind on PATH")
        self.paths.state.mkdir(parents=True, exist_ok=True)
        clusters = run("kind", "get", "clusters", quiet=True).split()
        if NAME not in clusters:
            with phase("kind create cluster"):
                run("kind", "create", "cluster", "--name", NAME, "--kubeconfig", self.paths.kubeconfig, "--wait", "180s")
        else:
            run("kind", "export", "kubeconfig", "--name", NAME, "--kubeconfig", self.paths.kubeconfig, quiet=True)
        self._shared_storage()
        with phase("docker build and kind load"):
            run("docker", "build", "-t", PROJECT_IMAGE, str(REPO), quiet=True)
            run("kind", "load", "docker-image", PROJECT_IMAGE, "--name", NAME, quiet=True)

    def _shared_storage(self) -> None:
        """kind's provisioner config with sharedFileSystemPath instead of nodePathMap (one node shares it trivially).

        Not exercised by CI (it has no Docker): kept to one patch and a restart.
        """
        kubectl = ("kubectl", "--kubeconfig", self.paths.kubeconfig, "-n", storage.NAMESPACE)
        patch = json.dumps({"data": {"config.json": storage.shared_config(VOLUMES)}})
        out = run(*kubectl, "patch", "configmap", storage.CONFIGMAP, "--type", "merge", "-p", patch, quiet=True)
        if "no change" not in out:  # the provisioner reads its config at start; restart it rather than wait
            run(*kubectl, "rollout", "restart", "deployment/local-path-provisioner", quiet=True)
            run(*kubectl, "rollout", "status", "deployment/local-path-provisioner", "--timeout", "120s", quiet=True)

    def down(self) -> None:
        if available():
            run("kind", "delete", "cluster", "--name", NAME, quiet=True)
        self.paths.kubeconfig.unlink(missing_ok=True)

    def status(self) -> str:
        return run("kubectl", "--kubeconfig", str(self.paths.kubeconfig), "get", "nodes", "-o", "wide", quiet=True)

    def env(self) -> str:
        return f"export KUBECONFIG={self.paths.kubeconfig}"
