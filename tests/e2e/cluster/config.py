"""Pinned versions, paths and addresses of the local cluster."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

KUBERNETES = "1.28.15"   # kubelet 1.28 is the newest validated with Debian's containerd 1.6 on cgroup v1
ETCD = "3.5.21"
HELM = "3.16.4"
COREDNS = "1.11.3"
LOCAL_PATH_PROVISIONER = "0.0.37"  # the default StorageClass, as kind ships one
# NetworkPolicy enforcement (iptables and ipsets, any CNI). The only version the module proxy serves here;
# flaws are reported against it, and it runs in this throwaway test cluster alone, never in the product.
KUBE_ROUTER = "2.1.0"
# The kind provider: kind's Go module, and the exact versions of what kind's node image fetches by name
# that this Kubernetes's kubeadm asks for (``kubeadm config images list``), built here from their modules.
KIND = "0.33.0"
KIND_ETCD = "3.5.15"
KIND_COREDNS = "1.10.1"
CRICTL = "1.34.0"
CONTAINERD = "2.3.4"     # kind's: its node image build runs "ctr info", which Debian's containerd 1.6 lacks
# Debian packages of the kind provider, each with the command that shows it installed (dnsmasq-base: the
# program without the system service, which would take port 53)
KIND_APT_PACKAGES = {"docker.io": "dockerd", "docker-registry": "docker-registry", "dnsmasq-base": "dnsmasq"}
PAUSE_IMAGE = "localhost/pause:3.9"
PROJECT_IMAGE = "localhost/ftpipeline:e2e"
BASE_IMAGE = "localhost/ftpipeline-base:bookworm"
# Debian packages of the local provider, each with the command or path that shows it installed
APT_PACKAGES = {"containerd": "containerd", "runc": "runc", "containernetworking-plugins": "/usr/lib/cni/bridge",
                "buildah": "buildah", "debootstrap": "debootstrap", "iptables": "iptables", "conntrack": "conntrack",
                "socat": "socat", "openssl": "openssl", "gcc": "gcc", "libc6-dev": "/usr/lib/x86_64-linux-gnu/libc.a",
                "ipset": "ipset"}


@dataclass(frozen=True)
class Paths:
    cache: Path
    state: Path

    @classmethod
    def from_env(cls) -> Paths:
        cache = Path(os.environ.get("FTPIPELINE_E2E_CACHE", Path.home() / ".cache" / "ftpipeline-e2e"))
        state = Path(os.environ.get("FTPIPELINE_E2E_STATE", "/var/lib/ftpipeline-e2e"))
        return cls(cache, state)

    @property
    def gomodcache(self) -> Path:
        return self.cache / "go" / "mod"

    @property
    def gocache(self) -> Path:
        return self.cache / "go" / "build"

    def bin(self, component: str, version: str) -> Path:
        return self.cache / "bin" / f"{component}-v{version}"

    @property
    def k8s_bin(self) -> Path:
        return self.bin("k8s", KUBERNETES)

    @property
    def images(self) -> Path:
        return self.cache / "images"

    @property
    def containerd_root(self) -> Path:  # persists: imported images survive down/up
        return self.cache / "containerd"

    @property
    def pki(self) -> Path:
        return self.state / "pki"

    @property
    def kubeconfig(self) -> Path:
        return self.state / "admin.kubeconfig"

    @property
    def volumes(self) -> Path:  # the StorageClass's volumes: cluster state, gone with down
        return self.state / "local-path"


@dataclass(frozen=True)
class Network:
    node: str = "ftp-node"
    node_ip: str = "10.255.254.1"         # on its own interface: independent of the machine's network
    node_if: str = "ftpnode0"
    bridge: str = "ftpcni0"
    pod_cidr: str = "10.244.0.0/24"
    cluster_cidr: str = "10.244.0.0/16"
    service_cidr: str = "10.96.0.0/16"
    service_ip: str = "10.96.0.1"         # the kubernetes Service's ClusterIP
    apiserver_port: int = 6443
    local_path_health_port: int = 10262   # local-path-provisioner's /ready (it listens on every address)
    kube_router_health_port: int = 20244  # kube-router's /healthz


def write_if_changed(path: Path, text: str) -> None:
    """Write a component's file only if its content changes: kube-proxy (and kubelet) watch theirs, and
    kube-proxy exits when its file is rewritten, even with the same bytes (``up`` on a running cluster)."""
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
