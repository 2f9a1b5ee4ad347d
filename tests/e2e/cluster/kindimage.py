"""kind's node image, made here: kind's base image on the bootstrapped Debian, then ``kind build node-image``.

Steps, each cached by version or content:

1. kind itself, from its Go module, and the module's source (for its base image files and the names of
   the images its node image fetches).
2. The base image: ``kind-base.Dockerfile`` with kind's ``images/base`` as context (see that file).
3. A Kubernetes server archive (``kubernetes/server/bin``: kubeadm, kubelet, kubectl and the image
   archives of kube-apiserver, kube-controller-manager, kube-scheduler and kube-proxy), the layout
   ``kind build node-image --type file`` reads, made from the Kubernetes built here.
4. The images kind fetches by name, built here and pushed to the registry mirror (``mirror.py``):
   etcd and CoreDNS at the versions kubeadm asks for, the pause image, kind's local-path-provisioner
   (rancher's, which is what kind's image packages) and its helper (the bootstrapped Debian). kindnetd,
   kind's CNI, is published in no module this machine reaches: the name holds a stand-in that exits with
   a message saying so, and the provider creates its clusters with ``disableDefaultCNI`` and installs
   its own CNI (``podnet.py``).
5. ``kind build node-image`` with that base image and archive.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from . import build
from .build import phase, run
from .config import (BASE_IMAGE, CONTAINERD, CRICTL, KIND, KIND_COREDNS, KIND_ETCD, KUBERNETES, LOCAL_PATH_PROVISIONER,
                     PAUSE_IMAGE, Paths)
from .mirror import Mirror

DOCKERFILE = Path(__file__).with_name("kind-base.Dockerfile")
CONTROL_PLANE = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")


def ensure_kind(paths: Paths) -> Path:
    binary = paths.bin("kind", KIND) / "kind"
    if not binary.exists():
        with phase(f"go install kind v{KIND}"):
            run("go", "install", f"sigs.k8s.io/kind@v{KIND}",
                env={**build._go_env(paths), "CGO_ENABLED": "0", "GOBIN": str(binary.parent)})
    return binary


def kind_source(paths: Paths) -> Path:
    info = run("go", "mod", "download", "-json", f"sigs.k8s.io/kind@v{KIND}", env=build._go_env(paths), quiet=True)
    return Path(json.loads(info)["Dir"])


def fetched_images(source: Path) -> dict[str, str]:
    """The names kind's node image build fetches beside kubeadm's list, read from kind's source."""
    consts = "\n".join(p.read_text() for p in (source / "pkg/build/nodeimage").glob("const*.go"))
    config = (source / "images/base/files/etc/containerd/config.toml").read_text()

    def one(pattern: str, text: str) -> str:
        found = re.search(pattern, text)
        if not found:
            raise RuntimeError(f"kind v{KIND}'s source no longer names {pattern!r}")
        return found.group(1)

    return {
        "pause": one(r'sandbox_image = "([^"]+)"', config),
        "kindnetd": one(r'kindnetdImage = "([^"]+)"', consts),
        "local-path-provisioner": one(r'storageProvisionerImage = "([^"]+)"', consts),
        "local-path-helper": one(r'storageHelperImage = "([^"]+)"', consts),
        "etcd": f"registry.k8s.io/etcd:{KIND_ETCD}-0",
        "coredns": f"registry.k8s.io/coredns/coredns:v{KIND_COREDNS}",
    }


def base_image(paths: Paths, mirror: Mirror, source: Path) -> str:
    """kind's base image, in Docker's store, tagged with a hash of everything it is made from (``source``:
    the kind module's)."""
    tools = {"crictl": build.go_module_binary(paths, paths.bin("crictl", CRICTL) / "crictl", "sigs.k8s.io/cri-tools",
                                              CRICTL, "/cmd/crictl")}
    for command in ("containerd", "ctr", "containerd-shim-runc-v2"):  # kind's build runs "ctr info": containerd 2
        tools[command] = build.go_module_binary(
            paths, paths.bin("containerd", CONTAINERD) / command, "github.com/containerd/containerd/v2", CONTAINERD,
            f"/cmd/{command}", f" -X github.com/containerd/containerd/v2/version.Version=v{CONTAINERD}",
            tags="no_aufs no_zfs no_btrfs no_devmapper", cgo=True)
    h = hashlib.sha256(DOCKERFILE.read_bytes() + mirror.ca.read_bytes() + CONTAINERD.encode() + CRICTL.encode())
    for f in sorted((source / "images/base/files").rglob("*")):
        if f.is_file():
            h.update(str(f.relative_to(source)).encode() + f.read_bytes())
    tag = f"localhost/kind-base:v{KIND}-{h.hexdigest()[:12]}"
    if docker_has(tag):
        return tag
    build.ensure_base(paths)
    with phase("kind base image (kind's files, Debian's runtime)"), tempfile.TemporaryDirectory() as tmp:
        context = Path(tmp)
        shutil.copytree(source / "images/base/files", context / "files")
        local = context / "local"
        (local / "usr/local/bin").mkdir(parents=True)
        (local / "usr/local/share/ca-certificates").mkdir(parents=True)
        for command, binary in tools.items():
            shutil.copyfile(binary, local / "usr/local/bin" / command)
        shutil.copyfile(mirror.ca, local / "usr/local/share/ca-certificates/ftpipeline-e2e-mirror.crt")
        subprocess.run(["chmod", "-R", "u+w", str(context)], check=True)
        run("buildah", "bud", "--isolation", "chroot", "--network", "host", "--build-arg", f"BASE={BASE_IMAGE}",
            "-t", tag, "-f", DOCKERFILE, context, quiet=True)
        to_docker(tag)
    return tag


def to_docker(image: str) -> None:
    run("buildah", "push", "-q", image, f"docker-daemon:{image}", quiet=True)


def docker_has(image: str) -> bool:
    return subprocess.run(["docker", "image", "inspect", image], capture_output=True).returncode == 0


def one_binary_image(name: str, files: dict[str, Path], *, base: str = "scratch", entrypoint: list[str] | None = None,
                     packages: tuple[str, ...] = (), label: str = "") -> str:
    """A one-binary image in buildah's store: ``files`` maps paths in the image to files here."""
    ctr = run("buildah", "from", base, quiet=True).strip()
    try:
        if packages:
            run("buildah", "run", "--isolation", "chroot", "--network", "host", ctr, "--", "sh", "-c",
                "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "
                + " ".join(packages) + " && rm -rf /var/lib/apt/lists/*", quiet=True)
        for target, source in files.items():
            run("buildah", "copy", "--chmod", "0755", ctr, source, target, quiet=True)
        config = ["--env", "PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin"]
        if entrypoint:
            config += ["--entrypoint", json.dumps(entrypoint)]
        if label:
            config += ["--label", f"org.opencontainers.image.description={label}"]
        run("buildah", "config", *config, ctr, quiet=True)
        run("buildah", "commit", "-q", ctr, name, quiet=True)
    finally:
        run("buildah", "rm", ctr, quiet=True)
    return name


def server_archive(paths: Paths) -> Path:
    """kubernetes-server-linux-amd64.tar.gz, as a release lays it out, from the Kubernetes built here."""
    archive = paths.cache / "kind" / f"kubernetes-server-v{KUBERNETES}-linux-amd64.tar.gz"
    if archive.exists():
        return archive
    build.ensure_k8s(paths, ["kubeadm", "kubelet", "kubectl", *CONTROL_PLANE, "kube-proxy"])
    k8s = paths.k8s_bin
    with phase(f"Kubernetes v{KUBERNETES} server archive"), tempfile.TemporaryDirectory() as tmp:
        bin_dir = Path(tmp) / "kubernetes/server/bin"
        bin_dir.mkdir(parents=True)
        (Path(tmp) / "kubernetes/version").write_text(f"v{KUBERNETES}\n")
        for command in ("kubeadm", "kubelet", "kubectl"):
            shutil.copyfile(k8s / command, bin_dir / command)
            (bin_dir / command).chmod(0o755)
        build.ensure_base(paths)
        for command in (*CONTROL_PLANE, "kube-proxy"):
            name = f"registry.k8s.io/{command}:v{KUBERNETES}"
            if command == "kube-proxy":  # the only one that needs a userland: iptables, ipset, conntrack
                one_binary_image(name, {f"/usr/local/bin/{command}": k8s / command}, base=BASE_IMAGE,
                                 packages=("iptables", "ipset", "conntrack", "kmod"))
            else:
                one_binary_image(name, {f"/usr/local/bin/{command}": k8s / command})
            run("buildah", "push", "-q", name, f"docker-archive:{bin_dir / command}.tar:{name}", quiet=True)
            (bin_dir / f"{command}.docker_tag").write_text(f"v{KUBERNETES}\n")
        archive.parent.mkdir(parents=True, exist_ok=True)
        run("tar", "-C", tmp, "-I", "gzip -1", "-cf", f"{archive}.tmp", "kubernetes")
        Path(f"{archive}.tmp").rename(archive)
    return archive


def mirror_images(paths: Paths, mirror: Mirror, names: dict[str, str]) -> None:
    """Build and push what kind fetches by name and the mirror does not hold yet."""
    missing = {k: v for k, v in names.items() if not mirror.has(v)}
    if not missing:
        return
    build.ensure_base(paths)
    etcd = build.go_module_binary(paths, paths.bin("etcd", KIND_ETCD) / "etcd", "go.etcd.io/etcd/server/v3", KIND_ETCD)
    coredns = build.go_module_binary(paths, paths.bin("coredns", KIND_COREDNS) / "coredns",
                                     "github.com/coredns/coredns", KIND_COREDNS)
    provisioner = paths.bin("local-path-provisioner", LOCAL_PATH_PROVISIONER) / "local-path-provisioner"
    build.ensure_go_binaries(paths)
    build.ensure_pause(paths)
    makers = {
        "pause": lambda name: PAUSE_IMAGE,
        "etcd": lambda name: one_binary_image(name, {"/usr/local/bin/etcd": etcd}),
        "coredns": lambda name: one_binary_image(name, {"/coredns": coredns}, entrypoint=["/coredns"]),
        "local-path-provisioner": lambda name: one_binary_image(name, {"/usr/local/bin/local-path-provisioner": provisioner}),
        "local-path-helper": lambda name: BASE_IMAGE,
        "kindnetd": lambda name: one_binary_image(
            name, {}, base=BASE_IMAGE, entrypoint=["/bin/sh", "-c", f"echo '{STAND_IN}' >&2; exit 1"], label=STAND_IN),
    }
    for key, name in missing.items():
        mirror.push(makers[key](name), name)


STAND_IN = ("kindnetd is published in no registry or module this machine reaches; this cluster runs with "
            "disableDefaultCNI and its own CNI instead")


def node_image(paths: Paths, mirror: Mirror) -> str:
    """kind's node image for the Kubernetes built here, made by ``kind build node-image``."""
    kind = ensure_kind(paths)
    source = kind_source(paths)
    base = base_image(paths, mirror, source)
    tag = f"localhost/kind-node:v{KUBERNETES}-{base.rsplit('-', 1)[1]}"
    if docker_has(tag):
        return tag
    archive = server_archive(paths)
    mirror_images(paths, mirror, fetched_images(source))
    with phase("kind build node-image"):
        run(kind, "build", "node-image", "--type", "file", archive, "--base-image", base, "--image", tag, quiet=True)
    return tag
