"""Build (or find in the cache) everything the local cluster runs.

Nothing here comes from a container registry or a release download:

- Debian packages: containerd, runc, CNI plugins, buildah, debootstrap;
- Go modules: etcd, CoreDNS (cluster DNS, run as a node process), local-path-provisioner (the
  default StorageClass, also a node process), kube-router (its NetworkPolicy controller alone, so
  the chart's policies are enforced with the bridge CNI), and kube-apiserver, kube-controller-manager,
  kube-scheduler, kube-proxy, kubelet and kubectl built from a wrapper module
  whose go.mod maps each ``k8s.io/<staging>`` module to its published
  ``v0.X.Y`` (``k8s.io/kubernetes`` itself replaces them with ``./staging``
  paths, so it cannot be built or installed directly); helm via go install;
- the pause image, compiled from ``build/pause/linux/pause.c`` in the
  Kubernetes module source;
- a Debian bookworm base image made with debootstrap, and the project image
  built from the repository's own Dockerfile with buildah on top of it.

Every artifact is keyed by version (binaries) or content hash (the project
image), so a warm ``up`` builds nothing.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

from .config import (APT_PACKAGES, BASE_IMAGE, COREDNS, ETCD, HELM, KUBE_ROUTER, KUBERNETES, LOCAL_PATH_PROVISIONER,
                     PAUSE_IMAGE, PROJECT_IMAGE, Paths)

REPO = Path(__file__).resolve().parents[3]
K8S_COMMANDS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy", "kubectl")
# Modules that the checksum database, as the module proxy serves it, does not know (404): go would refuse
# them, so their hashes are taken on first download (and kept in the wrapper's go.sum) instead.
NOT_IN_SUMDB = ("github.com/rancher/local-path-provisioner", "sigs.k8s.io/sig-storage-lib-external-provisioner/v11")


@contextmanager
def phase(name: str) -> Iterator[None]:
    started = time.monotonic()
    print(f"--- {name}", flush=True)
    try:
        yield
    finally:
        print(f"--- {name}: {time.monotonic() - started:.1f}s", flush=True)


def run(*cmd: str | Path, env: dict[str, str] | None = None, cwd: Path | None = None, quiet: bool = False) -> str:
    proc = subprocess.run([str(c) for c in cmd], env=env, cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} failed ({proc.returncode}):\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    if not quiet and proc.stdout.strip():
        print(proc.stdout.strip()[-2000:], flush=True)
    return proc.stdout


def ensure_apt(packages: dict[str, str] = APT_PACKAGES) -> None:
    """Debian's ``packages`` (name: a command or path it installs) that are missing; the local provider's by default."""
    missing = [p for p, probe in packages.items()
               if not (Path(probe).exists() if probe.startswith("/") else shutil.which(probe))]
    if not missing:
        return
    with phase(f"apt-get install {' '.join(missing)}"):
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        run("apt-get", "update", "-qq", env=env, quiet=True)
        run("apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing, env=env, quiet=True)


def _go_env(paths: Paths) -> dict[str, str]:
    if shutil.which("go") is None:
        raise RuntimeError("Go is needed to build Kubernetes and etcd from their modules")
    return {**os.environ, "GOMODCACHE": str(paths.gomodcache), "GOCACHE": str(paths.gocache), "GOFLAGS": "-mod=mod"}


def _k8s_source(paths: Paths, env: dict[str, str]) -> Path:
    """The wrapper module: k8s.io/kubernetes with every staging module pinned to its release."""
    src = paths.cache / "src" / f"k8s-v{KUBERNETES}"
    if (src / "go.mod").exists():
        return src
    src.mkdir(parents=True, exist_ok=True)
    info = run("go", "mod", "download", "-json", f"k8s.io/kubernetes@v{KUBERNETES}", env=env, cwd=src, quiet=True)
    import json

    upstream = Path(json.loads(info)["GoMod"]).read_text()
    staging = sorted({line.split()[0] for line in upstream.splitlines() if "=> ./staging/" in line})
    minor = "v0." + KUBERNETES.split(".", 1)[1]
    replaces = "\n".join(f"\t{m} => {m} {minor}" for m in staging)
    (src / "go.mod").write_text(f"module ftpipeline.io/e2e/k8s\n\ngo 1.20\n\nrequire k8s.io/kubernetes v{KUBERNETES}\n\n"
                                f"replace (\n{replaces}\n)\n")
    return src


def ensure_k8s(paths: Paths, commands: list[str]) -> None:
    """Kubernetes commands (``cmd/<name>``) at KUBERNETES, built from the wrapper module where missing."""
    wanted = [c for c in commands if not (paths.k8s_bin / c).exists()]
    if not wanted:
        return
    env = _go_env(paths)
    src = _k8s_source(paths, env)
    minor = KUBERNETES.split(".")[1]
    ldflags = (f"-s -w -X k8s.io/component-base/version.gitVersion=v{KUBERNETES} "
               f"-X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor={minor}")
    # The static commands in one go build, which links them side by side (a link is one long single-threaded
    # step); kubelet needs cgo (cadvisor, mount utilities), so it is a build of its own.
    static = [c for c in wanted if c != "kubelet"]
    for group, cgo in ((static, "0"), ([c for c in wanted if c == "kubelet"], "1")):
        if not group:
            continue
        with phase(f"go build {', '.join(group)} v{KUBERNETES}"):
            paths.k8s_bin.mkdir(parents=True, exist_ok=True)
            target = paths.k8s_bin / group[0] if len(group) == 1 else f"{paths.k8s_bin}/"
            run("go", "build", "-tags", "selinux,notest", "-ldflags", ldflags, "-o", target,
                *(f"k8s.io/kubernetes/cmd/{c}" for c in group), env={**env, "CGO_ENABLED": cgo}, cwd=src)


def go_module_binary(paths: Paths, binary: Path, module: str, version: str, package: str = "", stamp: str = "",
                     tags: str = "", cgo: bool = False) -> Path:
    """One command of a Go module at an exact version, built (static unless ``cgo``) through a wrapper module
    where missing."""
    if binary.exists():
        return binary
    env = _go_env(paths)
    with phase(f"go build {binary.name} v{version}"):
        src = paths.cache / "src" / f"{binary.name}-v{version}"
        src.mkdir(parents=True, exist_ok=True)
        if not (src / "go.mod").exists():
            run("go", "mod", "init", f"ftpipeline.io/e2e/{binary.name}", env=env, cwd=src, quiet=True)
        run("go", "get", f"{module}@v{version}", env={**env, "GONOSUMDB": ",".join(NOT_IN_SUMDB)}, cwd=src, quiet=True)
        run("go", "build", "-tags", tags, "-ldflags", "-s -w" + stamp, "-o", binary, module + package,
            env={**env, "CGO_ENABLED": "1" if cgo else "0"}, cwd=src)
    return binary


def ensure_go_binaries(paths: Paths) -> None:
    k8s = paths.k8s_bin
    wanted = [c for c in (*K8S_COMMANDS, "kubelet") if not (k8s / c).exists()]
    etcd = paths.bin("etcd", ETCD) / "etcd"
    helm = paths.bin("helm", HELM) / "helm"
    coredns = paths.bin("coredns", COREDNS) / "coredns"
    local_path = paths.bin("local-path-provisioner", LOCAL_PATH_PROVISIONER) / "local-path-provisioner"
    kube_router = paths.bin("kube-router", KUBE_ROUTER) / "kube-router"
    if not wanted and all(b.exists() for b in (etcd, helm, coredns, local_path, kube_router)):
        return

    def modules() -> None:
        for binary, module, version, stamp, package in (
                (etcd, "go.etcd.io/etcd/server/v3", ETCD, "", ""),
                (coredns, "github.com/coredns/coredns", COREDNS, "", ""),
                (local_path, "github.com/rancher/local-path-provisioner", LOCAL_PATH_PROVISIONER,
                 f" -X main.VERSION=v{LOCAL_PATH_PROVISIONER}", ""),
                (kube_router, "github.com/cloudnativelabs/kube-router/v2", KUBE_ROUTER, "", "/cmd/kube-router")):
            go_module_binary(paths, binary, module, version, package, stamp)
        if not helm.exists():
            with phase(f"go install helm v{HELM}"):
                run("go", "install", "-ldflags", "-s -w", f"helm.sh/helm/v3/cmd/helm@v{HELM}",
                    env={**_go_env(paths), "CGO_ENABLED": "0", "GOBIN": str(helm.parent)})

    # Kubernetes and the other modules side by side: each go build leaves cores idle while it downloads modules
    # and while it links, which the other fills (the build and module caches are safe to share).
    together(lambda: ensure_k8s(paths, wanted), modules)


def together(*steps: Callable[[], object]) -> None:
    """``steps`` in threads of their own; the first failure is raised once all have ended."""
    with ThreadPoolExecutor(len(steps)) as pool:
        futures = [pool.submit(step) for step in steps]
    for future in futures:
        future.result()


def _buildah_has(image: str) -> bool:
    return subprocess.run(["buildah", "inspect", "--type", "image", image], capture_output=True).returncode == 0


def _save(image: str, archive: Path) -> None:
    tmp = archive.with_suffix(".tmp")
    tmp.unlink(missing_ok=True)
    run("buildah", "push", "-q", image, f"docker-archive:{tmp}:{image}")
    tmp.rename(archive)


def ensure_pause(paths: Paths) -> Path:
    archive = paths.images / "pause-3.9.tar"
    if archive.exists():
        return archive
    with phase("pause image (from the Kubernetes source)"):
        paths.images.mkdir(parents=True, exist_ok=True)
        source = paths.gomodcache / f"k8s.io/kubernetes@v{KUBERNETES}" / "build/pause/linux/pause.c"
        if not source.exists():
            _k8s_source(paths, _go_env(paths))
            run("go", "mod", "download", f"k8s.io/kubernetes@v{KUBERNETES}", env=_go_env(paths),
                cwd=paths.cache / "src" / f"k8s-v{KUBERNETES}", quiet=True)
        with tempfile.TemporaryDirectory() as tmp:
            binary = Path(tmp) / "pause"
            run("gcc", "-Os", "-static", "-DVERSION=3.9-ftpipeline", "-o", binary, source)
            run("strip", binary)
            ctr = run("buildah", "from", "scratch", quiet=True).strip()
            try:
                run("buildah", "copy", ctr, binary, "/pause", quiet=True)
                run("buildah", "config", "--entrypoint", '["/pause"]', "--user", "65535:65535", ctr, quiet=True)
                run("buildah", "commit", "-q", ctr, PAUSE_IMAGE, quiet=True)
            finally:
                run("buildah", "rm", ctr, quiet=True)
        _save(PAUSE_IMAGE, archive)
    return archive


def ensure_base(paths: Paths) -> None:
    if _buildah_has(BASE_IMAGE):
        return
    rootfs = paths.images / "rootfs-bookworm"
    if not (rootfs / "etc" / "debian_version").exists():
        with phase("debootstrap bookworm"):
            shutil.rmtree(rootfs, ignore_errors=True)
            run("debootstrap", "--variant=minbase", "--include=ca-certificates", "bookworm", rootfs,
                "http://deb.debian.org/debian", quiet=True)
    with phase("base image from the bootstrapped rootfs"):
        ctr = run("buildah", "from", "scratch", quiet=True).strip()
        try:
            mnt = run("buildah", "mount", ctr, quiet=True).strip()
            subprocess.run(f"tar -C {rootfs} -c . | tar -C {mnt} -x", shell=True, check=True)
            run("buildah", "umount", ctr, quiet=True)
            run("buildah", "config", "--env", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                "--cmd", "/bin/bash", ctr, quiet=True)
            run("buildah", "commit", "-q", ctr, BASE_IMAGE, quiet=True)
        finally:
            run("buildah", "rm", ctr, quiet=True)


def project_hash() -> str:
    """Content hash of everything the project image is built from."""
    h = hashlib.sha256()
    files = [REPO / "Dockerfile", REPO / "pyproject.toml", REPO / "README.md"]
    for top in ("runtime", "operator", "examples"):
        files += sorted(p for p in (REPO / top).rglob("*") if p.is_file() and "__pycache__" not in p.parts
                        and "out" not in p.relative_to(REPO / top).parts)
    for f in files:
        h.update(str(f.relative_to(REPO)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def _pip_cert() -> str | None:
    """The CA bundle the host's pip is told to trust, if any (networks that intercept TLS)."""
    cert = os.environ.get("PIP_CERT")
    if not cert:
        proc = subprocess.run(["python3", "-m", "pip", "config", "get", "global.cert"], capture_output=True, text=True)
        cert = proc.stdout.strip() if proc.returncode == 0 else None
    return cert if cert and Path(cert).is_file() else None


def _prebuilt_s3_gateway() -> None:
    """The S3 gateway this machine built for the integration tests (``embedded/s3.py``), where the Dockerfile
    takes it instead of building it again."""
    from ftpipeline.embedded import s3

    target = REPO / ".prebuilt" / f"versitygw-v{s3.VERSION}"
    if not target.exists():
        target.parent.mkdir(exist_ok=True)
        shutil.copy2(s3.build_s3_server(), target)


def ensure_project_image(paths: Paths) -> Path:
    archive = paths.images / f"ftpipeline-{project_hash()}.tar"
    if archive.exists():
        return archive
    ensure_base(paths)
    _prebuilt_s3_gateway()
    with phase("project image (Dockerfile, buildah)"):
        cmd = ["buildah", "bud", "--isolation", "chroot", "--network", "host", "--layers",
               "--build-arg", f"BASE={BASE_IMAGE}", "-t", PROJECT_IMAGE, "-f", str(REPO / "Dockerfile")]
        cert = _pip_cert()
        if cert:
            cmd += ["--secret", f"id=pip_cert,src={cert}"]
        run(*cmd, str(REPO), quiet=True)
        for old in paths.images.glob("ftpipeline-*.tar"):
            old.unlink()
        _save(PROJECT_IMAGE, archive)
    return archive
