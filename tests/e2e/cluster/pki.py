"""Certificates and kubeconfigs of the local cluster, made with the openssl CLI.

One CA signs everything: the API server's serving certificate, a client
certificate per component (the Common Name and Organisation are the user
and group RBAC sees: ``system:kube-controller-manager``,
``system:node:<node>``/``system:nodes``, ``admin``/``system:masters``), the
kubelet's serving certificate, and the API server's client certificate
towards kubelets. The service-account token signing key pair is separate.
ECDSA P-256 keys: fast to make, accepted by every component.
"""

from __future__ import annotations

import base64
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .config import write_if_changed


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


@dataclass(frozen=True)
class Leaf:
    name: str
    cn: str
    org: str | None = None
    server: bool = False
    client: bool = False
    sans: tuple[str, ...] = ()


def _key(path: Path) -> None:
    _openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", str(path))
    path.chmod(0o600)


def make_ca(directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    if (directory / "ca.crt").exists():
        return
    _key(directory / "ca.key")
    _openssl("req", "-x509", "-new", "-key", str(directory / "ca.key"), "-sha256", "-days", "3650",
             "-subj", "/CN=ftpipeline-e2e-ca", "-out", str(directory / "ca.crt"),
             "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign")


def make_leaf(directory: Path, leaf: Leaf) -> None:
    crt, key, csr, ext = (directory / f"{leaf.name}.{s}" for s in ("crt", "key", "csr", "ext"))
    if crt.exists():
        return
    _key(key)
    subject = f"/CN={leaf.cn}" + (f"/O={leaf.org}" if leaf.org else "")
    _openssl("req", "-new", "-key", str(key), "-subj", subject, "-out", str(csr))
    usages = [u for u, on in (("serverAuth", leaf.server), ("clientAuth", leaf.client)) if on]
    lines = ["basicConstraints=critical,CA:FALSE", "keyUsage=critical,digitalSignature,keyEncipherment",
             f"extendedKeyUsage={','.join(usages)}"]
    if leaf.sans:
        lines.append("subjectAltName=" + ",".join(("IP:" if _is_ip(s) else "DNS:") + s for s in leaf.sans))
    ext.write_text("\n".join(lines) + "\n")
    _openssl("x509", "-req", "-in", str(csr), "-CA", str(directory / "ca.crt"), "-CAkey", str(directory / "ca.key"),
             "-CAcreateserial", "-sha256", "-days", "3650", "-extfile", str(ext), "-out", str(crt))
    csr.unlink()
    ext.unlink()


def make_service_account_keys(directory: Path) -> None:
    if (directory / "sa.key").exists():
        return
    _key(directory / "sa.key")
    _openssl("ec", "-in", str(directory / "sa.key"), "-pubout", "-out", str(directory / "sa.pub"))


def _is_ip(text: str) -> bool:
    parts = text.split(".")
    return len(parts) == 4 and all(p.isdigit() for p in parts)


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def kubeconfig(path: Path, pki: Path, server: str, user: str, cert: str) -> None:
    """A kubeconfig for ``user`` authenticating with ``pki/<cert>.crt``."""
    write_if_changed(path, f"""apiVersion: v1
kind: Config
clusters:
- name: ftpipeline-e2e
  cluster:
    server: {server}
    certificate-authority-data: {_b64(pki / "ca.crt")}
users:
- name: {user}
  user:
    client-certificate-data: {_b64(pki / f"{cert}.crt")}
    client-key-data: {_b64(pki / f"{cert}.key")}
contexts:
- name: ftpipeline-e2e
  context:
    cluster: ftpipeline-e2e
    user: {user}
current-context: ftpipeline-e2e
""")
    path.chmod(0o600)


def make_all(pki: Path, node: str, node_ip: str, service_ip: str, pool: list[str] | None = None) -> None:
    make_ca(pki)
    make_service_account_keys(pki)
    sans = (node_ip, service_ip, "127.0.0.1", "localhost", "kubernetes", "kubernetes.default",
            "kubernetes.default.svc", "kubernetes.default.svc.cluster.local")
    for leaf in (
        Leaf("apiserver", "kube-apiserver", server=True, sans=sans),
        Leaf("apiserver-kubelet-client", "kube-apiserver-kubelet-client", "system:masters", client=True),
        Leaf("admin", "admin", "system:masters", client=True),
        Leaf("controller-manager", "system:kube-controller-manager", client=True),
        Leaf("scheduler", "system:kube-scheduler", client=True),
        Leaf("kube-proxy", "system:kube-proxy", client=True),
        Leaf("kubelet", f"system:node:{node}", "system:nodes", client=True),
        Leaf("kubelet-serving", node, server=True, sans=(node_ip, node, "localhost", "127.0.0.1")),
        *(leaf for name in pool or () for leaf in (
            Leaf(f"kubelet-{name}", f"system:node:{name}", "system:nodes", client=True),
            Leaf(f"kubelet-serving-{name}", name, server=True, sans=(node_ip, name, "localhost", "127.0.0.1")))),
    ):
        make_leaf(pki, leaf)
