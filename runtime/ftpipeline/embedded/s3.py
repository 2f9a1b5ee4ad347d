"""A private, real S3-compatible server for local runs and tests: the Versity S3 Gateway over a directory.

Why: a pipeline whose checkpoints and output are at ``s3://`` URIs must run on
one machine too, and its tests must talk to a real S3 server (request
signing, conditional writes, listing, multipart uploads), not a mock. When
``ftpipeline run`` meets an ``s3://`` path and no endpoint is configured,
it starts one here, as it starts Redis and ZooKeeper.

The server is ``versitygw posix``: an Apache-2.0 gateway, one Go binary,
that serves the directories under its root as buckets and their files as
objects. It honours ``If-None-Match: *`` on PutObject and
CompleteMultipartUpload (a second create of a key is refused with 412),
which is what the barriers' commit objects need. It is built from its Go
module (no release download is needed) into
``~/.cache/ftpipeline/versitygw-v<version>/`` on first use when no
``versitygw`` is on ``PATH``; ``FTPIPELINE_S3_SERVER`` names a binary.

States: the lifecycle of ``embedded/process.py``. The root user's keys are
made once per directory and kept there (readable by the owner alone), with
the port, so a restarted server keeps both and its clients' configuration
stays valid; its data is on disk, so a ``kill`` loses nothing a request was
told was written.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

from ftpipeline.embedded.jars import cache_root
from ftpipeline.embedded.ports import free_port
from ftpipeline.embedded.private import write_private
from ftpipeline.embedded.process import ServerProcess
from ftpipeline.objectstore.config import S3Config

MODULE = "github.com/versity/versitygw"
VERSION = "1.8.0"
HEALTH = "/health"
REGION = "us-east-1"


def _cached_binary() -> Path:
    return cache_root() / f"versitygw-v{VERSION}" / "versitygw"


def build_s3_server(target: Path | None = None) -> Path:
    """``go install`` the pinned gateway into ``target``'s directory (the cache by default); its module
    and build caches go beside it, so a second build is quick."""
    target = target or _cached_binary()
    if target.exists():
        return target
    go = shutil.which("go")
    if go is None:
        raise FileNotFoundError(
            f"no S3 server found: install versitygw v{VERSION} on PATH, set FTPIPELINE_S3_SERVER to its binary, "
            f"or install Go so it can be built from {MODULE}; or configure a store (AWS_ENDPOINT_URL and keys)")
    target.parent.mkdir(parents=True, exist_ok=True)
    go_root = cache_root() / "go"
    env = {**os.environ, "GOBIN": str(target.parent), "GOFLAGS": "-mod=mod",
           "GOMODCACHE": os.environ.get("GOMODCACHE", str(go_root / "mod")),
           "GOCACHE": os.environ.get("GOCACHE", str(go_root / "build"))}
    print(f"building the S3 server {MODULE}@v{VERSION} (once; about two minutes)", file=sys.stderr, flush=True)
    proc = subprocess.run([go, "install", "-trimpath", "-ldflags=-s -w", f"{MODULE}/cmd/versitygw@v{VERSION}"],
                          env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"building versitygw v{VERSION} failed:\n{proc.stderr[-3000:]}")
    return target


def find_s3_server() -> Path:
    """The gateway's binary: ``FTPIPELINE_S3_SERVER``, else one on ``PATH``, else the cache's (built now if
    it is not there yet)."""
    named = os.environ.get("FTPIPELINE_S3_SERVER")
    if named:
        return Path(named)
    on_path = shutil.which("versitygw")
    if on_path:
        return Path(on_path)
    return build_s3_server()


def s3_command(data: Path, port: int, bind: str = "127.0.0.1", tls_dir: Path | None = None,
               iam_dir: Path | None = None) -> list[str]:
    """The gateway serving the directories under ``data`` as buckets (its root keys: ``ROOT_ACCESS_KEY`` and
    ``ROOT_SECRET_KEY`` in its environment); ``tls_dir``: HTTPS alone, with ``tls.crt`` and ``tls.key`` there;
    ``iam_dir``: users besides the root, kept there (``GatewayAdmin``), each reaching only its own buckets."""
    tls = ["--cert", str(tls_dir / "tls.crt"), "--key", str(tls_dir / "tls.key")] if tls_dir is not None else []
    iam = ["--iam-dir", str(iam_dir)] if iam_dir is not None else []
    # --keep-alive: the gateway closes each connection after one response unless told otherwise, and every
    # request of a client then pays a new connection (a TLS handshake, with --cert)
    return [str(find_s3_server()), "--port", f"{bind}:{port}", *tls, *iam, "--keep-alive", "--quiet",
            "--health", HEALTH, "--region", REGION, "posix", str(data)]


class BucketTaken(RuntimeError):
    """The bucket exists and another user owns it."""


class GatewayAdmin:
    """The gateway's users and buckets, through its admin API as the root user (``versitygw admin``): how the
    operator gives each pipeline keys of its own and the buckets its locations name, which no other
    pipeline's keys reach (the gateway lets a ``user`` into the buckets it owns alone)."""

    def __init__(self, endpoint: str, access_key: str, secret_key: str) -> None:
        self.endpoint = endpoint
        self._env = {**os.environ, "ADMIN_ACCESS_KEY": access_key, "ADMIN_SECRET_KEY": secret_key}

    def _run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(find_s3_server()), "admin", "--endpoint-url", self.endpoint, *args],
                              env=self._env, capture_output=True, text=True, timeout=30)

    def _check(self, proc: subprocess.CompletedProcess[str], what: str) -> str:
        if proc.returncode != 0:
            raise RuntimeError(f"S3 gateway admin: {what} failed: {(proc.stderr or proc.stdout).strip()[-500:]}")
        return proc.stdout

    def _table(self, command: str) -> list[list[str]]:
        """The rows of a listing (``Name  Owner`` columns under a dashed line)."""
        lines = self._check(self._run(command), command).splitlines()
        rows = [line.split() for line in lines if line.strip()]
        return rows[2:] if len(rows) >= 2 and set(rows[1][0]) <= {"-"} else rows[1:]

    def users(self) -> set[str]:
        return {row[0] for row in self._table("list-users")}

    def bucket_owners(self) -> dict[str, str]:
        return {row[0]: row[1] for row in self._table("list-buckets") if len(row) >= 2}

    def ensure_user(self, access_key: str, secret_key: str) -> None:
        """The user with these keys exists (its secret set again if it did)."""
        verb = "update-user" if access_key in self.users() else "create-user"
        self._check(self._run(verb, "--access", access_key, "--secret", secret_key, "--role", "user"), verb)

    def delete_user(self, access_key: str) -> None:
        if access_key in self.users():
            self._check(self._run("delete-user", "--access", access_key), "delete-user")

    def ensure_bucket(self, name: str, owner: str) -> None:
        """Bucket ``name`` exists and ``owner`` owns it; BucketTaken when another user does."""
        held = self.bucket_owners().get(name)
        if held is None:
            proc = self._run("create-bucket", "--owner", owner, "--bucket", name)
            if proc.returncode == 0:
                return
            held = self.bucket_owners().get(name)  # made meanwhile by someone else?
            if held is None:
                self._check(proc, f"create-bucket {name}")
        if held != owner:
            raise BucketTaken(f"bucket {name!r} belongs to another user of the object store")


class EmbeddedS3(ServerProcess):
    """``versitygw posix`` serving ``directory/data`` on a loopback port; ``config`` reaches it as its root user.
    ``bind``: the address it listens on; ``users``: other users than the root may be added (``GatewayAdmin``),
    kept in ``directory/iam``; ``tls_dir``: HTTPS alone (``ca.crt``, ``tls.crt`` naming ``localhost``,
    ``tls.key``), which ``config`` trusts through its CA file."""

    what, stem, marker = "S3 server (versitygw)", "s3", b"versitygw"
    stop_grace_s = 5.0

    def __init__(self, directory: Path, port: int = 0, bind: str = "127.0.0.1", users: bool = False,
                 tls_dir: Path | None = None) -> None:
        super().__init__(directory)
        self.tls_dir = tls_dir
        self.port = port
        self.bind = bind
        self.data = directory / "data"
        self.iam = directory / "iam" if users else None

    @property
    def endpoint(self) -> str:
        if self.tls_dir is not None:
            return f"https://localhost:{self.port}"
        host = "127.0.0.1" if self.bind in ("127.0.0.1", "0.0.0.0", "") else self.bind
        return f"http://{host}:{self.port}"

    def _keys(self) -> dict[str, str]:
        path = self.directory / "s3.keys.json"
        if path.exists():
            return dict(json.loads(path.read_text()))
        keys = {"access_key": f"ftp{secrets.token_hex(8)}", "secret_key": secrets.token_urlsafe(30)}
        write_private(path, json.dumps(keys).encode())
        return keys

    @property
    def config(self) -> S3Config:
        keys = self._keys()
        return S3Config(endpoint=self.endpoint, region=REGION, access_key=keys["access_key"],
                        secret_key=keys["secret_key"], path_style=True,
                        ca_file=str(self.tls_dir / "ca.crt") if self.tls_dir is not None else None)

    def _answers(self) -> bool:
        context = ssl.create_default_context(cafile=str(self.tls_dir / "ca.crt")) if self.tls_dir else None
        try:
            with urllib.request.urlopen(self.endpoint + HEALTH, timeout=2, context=context) as reply:
                return bool(reply.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def _address(self) -> dict[str, int]:
        return {"port": self.port}

    def _readdress(self, address: dict[str, int]) -> None:
        self.port = int(address["port"])

    def start(self, timeout_s: float = 30.0) -> EmbeddedS3:
        self._reap()
        self.data.mkdir(parents=True, exist_ok=True)
        if self.iam is not None:
            self.iam.mkdir(parents=True, exist_ok=True)
        # a restart keeps the address clients know (workers of a resumed run too)
        self.port = self.port or int((self._recorded_address() or {}).get("port", 0)) or free_port()
        keys = self._keys()
        args = s3_command(self.data, self.port, self.bind, tls_dir=self.tls_dir, iam_dir=self.iam)
        env = {**os.environ, "ROOT_ACCESS_KEY": keys["access_key"], "ROOT_SECRET_KEY": keys["secret_key"]}
        self._launch(args, self._answers, timeout_s, interval_s=0.02, env=env)
        return self

    def admin(self) -> GatewayAdmin:
        keys = self._keys()
        return GatewayAdmin(self.endpoint, keys["access_key"], keys["secret_key"])

    def create_bucket(self, name: str) -> None:
        """Make bucket ``name`` if it is not there (a directory under the root, as the gateway keeps one)."""
        (self.data / name).mkdir(parents=True, exist_ok=True)
