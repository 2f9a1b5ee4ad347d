"""A registry mirror for machines that reach no container registry: where kind's images come from here.

``kind build node-image`` loads the control-plane images from the Kubernetes
archive it is given, but fetches the others (etcd, CoreDNS, pause, kind's CNI
and storage images) by name, from ``registry.k8s.io`` and ``docker.io``, with
containerd inside its build container. Here those names resolve to this
machine: the Docker engine the provider starts gives its containers a DNS
server (dnsmasq) that answers for the two registries' hosts with the engine's
bridge address, where Debian's ``docker-registry`` (CNCF distribution) serves
them over TLS with a certificate of the cluster's CA, which the kind base
image trusts. Every other name is forwarded to the machine's own resolver.

The images are built here and pushed to the mirror under the names kind asks
for; ``mirror_images`` in ``kindimage.py`` says what each one is.
"""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
import sys
import urllib.request
from pathlib import Path

from . import capfilter, pki
from .build import phase, run
from .daemons import Daemons

BRIDGE_IP = "172.17.0.1"   # the Docker engine's default bridge (docker0), where the mirror listens
HOSTS = ("registry.k8s.io", "docker.io", "registry-1.docker.io")


def engine_running() -> bool:
    proc = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"], capture_output=True, text=True)
    return proc.returncode == 0 and bool(proc.stdout.strip())


def upstream_resolver() -> str:
    for line in Path("/etc/resolv.conf").read_text().splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] == "nameserver" and not parts[1].startswith("127."):
            return parts[1]
    return "8.8.8.8"


class Mirror:
    """The mirror's three daemons (with the engine) and the CA its certificate is signed by."""

    def __init__(self, daemons: Daemons, cache: Path) -> None:
        self.daemons = daemons
        self.dir = cache / "mirror"
        self.pki = self.dir / "pki"

    @property
    def ca(self) -> Path:
        """The CA the kind base image trusts: made once and kept, as the base image is."""
        pki.make_ca(self.pki)
        return self.pki / "ca.crt"

    @property
    def address(self) -> str:
        return f"{BRIDGE_IP}:443"

    def start_engine(self, data_root: Path) -> None:
        """dockerd with the mirror's DNS for its containers and runc behind ``capfilter``, unless an engine
        already runs (used as it is)."""
        if engine_running():
            if not self.daemons._alive("dockerd"):
                print(f"--- a Docker engine already runs: used as it is, so its containers resolve registries as it "
                      f"does, not to the mirror at {BRIDGE_IP}; kind build node-image needs one or the other", flush=True)
            return
        with phase("Docker engine"):
            data_root.mkdir(parents=True, exist_ok=True)
            runtime = self.daemons.state / "runc-capfilter"
            runtime.write_text(f'#!/bin/sh\nexec {sys.executable} {Path(capfilter.__file__).resolve()} "$@"\n')
            runtime.chmod(0o755)
            self.daemons._start("dockerd", "dockerd", "--data-root", data_root, "--bip", f"{BRIDGE_IP}/16",
                                "--dns", BRIDGE_IP,
                                "--add-runtime", f"capfilter={runtime}", "--default-runtime", "capfilter")
            self.daemons._wait("the Docker engine", engine_running, 60, "dockerd")

    def start(self) -> None:
        pki.make_ca(self.pki)
        pki.make_leaf(self.pki, pki.Leaf("registry", "ftpipeline-e2e-mirror", server=True, sans=(*HOSTS, BRIDGE_IP)))
        storage = self.dir / "storage"
        storage.mkdir(parents=True, exist_ok=True)
        config = self.dir / "config.yml"
        config.write_text(f"""version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: {storage}
  delete:
    enabled: true
http:
  addr: {self.address}
  tls:
    certificate: {self.pki / 'registry.crt'}
    key: {self.pki / 'registry.key'}
""")
        self.daemons._start("docker-registry", "docker-registry", "serve", config)
        self.daemons._wait("the registry mirror", self._registry_ready, 30, "docker-registry")
        address = "\n".join(f"address=/{h}/{BRIDGE_IP}" for h in HOSTS)
        dns = self.dir / "dnsmasq.conf"
        dns.write_text(f"listen-address={BRIDGE_IP}\nbind-interfaces\nno-resolv\nno-hosts\n"
                       f"server={upstream_resolver()}\n{address}\n")
        self.daemons._start("dnsmasq", "dnsmasq", "--keep-in-foreground", f"--conf-file={dns}",
                            f"--pid-file={self.daemons.state / 'run' / 'dnsmasq.own.pid'}")
        self.daemons._wait("the mirror's DNS", self._dns_ready, 30, "dnsmasq")

    def _registry_ready(self) -> bool:
        context = ssl.create_default_context(cafile=str(self.ca))
        with urllib.request.urlopen(f"https://{self.address}/v2/", timeout=2, context=context) as r:
            return bool(r.status == 200)

    @staticmethod
    def _dns_ready() -> bool:
        with socket.create_connection((BRIDGE_IP, 53), timeout=2):
            return True

    def push(self, image: str, name: str) -> None:
        """Push a buildah image to the mirror under the path of ``name`` (its registry host dropped)."""
        path = name.split("/", 1)[1]
        with phase(f"mirror {name}"):
            run("buildah", "push", "-q", "--cert-dir", self._trust(), image, f"docker://{self.address}/{path}", quiet=True)

    def _trust(self) -> Path:
        """A directory holding the CA alone: buildah reads every ``*.key`` there as a client key."""
        trust = self.dir / "trust"
        trust.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(self.ca, trust / "ca.crt")
        return trust

    def has(self, name: str) -> bool:
        repo, tag = name.split("/", 1)[1].rsplit(":", 1)
        context = ssl.create_default_context(cafile=str(self.ca))
        request = urllib.request.Request(f"https://{self.address}/v2/{repo}/manifests/{tag}", method="HEAD", headers={
            "Accept": "application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.manifest.v1+json"})
        try:
            with urllib.request.urlopen(request, timeout=5, context=context) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    def stop(self) -> None:
        for name in ("dnsmasq", "docker-registry", "dockerd"):
            self.daemons._stop(name, grace_s=20)
