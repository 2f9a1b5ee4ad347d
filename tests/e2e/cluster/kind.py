"""The kind provider: where Docker and kind exist, a kind cluster with the project image loaded.

The image is built from the same Dockerfile with ``docker build`` (base
``debian:bookworm-slim``) and loaded with ``kind load docker-image``; the
kubeconfig is written where the local provider writes its own, so
``env`` and the tests do not change.
"""

from __future__ import annotations

import shutil
import subprocess

from .build import REPO, phase, run
from .config import PROJECT_IMAGE, Paths

NAME = "ftpipeline-e2e"


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
        with phase("docker build and kind load"):
            run("docker", "build", "-t", PROJECT_IMAGE, str(REPO), quiet=True)
            run("kind", "load", "docker-image", PROJECT_IMAGE, "--name", NAME, quiet=True)

    def down(self) -> None:
        if available():
            run("kind", "delete", "cluster", "--name", NAME, quiet=True)
        self.paths.kubeconfig.unlink(missing_ok=True)

    def status(self) -> str:
        return run("kubectl", "--kubeconfig", str(self.paths.kubeconfig), "get", "nodes", "-o", "wide", quiet=True)

    def env(self) -> str:
        return f"export KUBECONFIG={self.paths.kubeconfig}"
