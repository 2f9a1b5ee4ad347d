"""The object store protocol: what checkpoints and sinks ask of the storage under them, and where it is.

Why: a pipeline's checkpoints and output live in a local directory (``ftpipeline
run``), on a volume the worker pods share, or in an S3-compatible bucket
(most clusters have no shared volume). The code that writes them speaks to
this protocol alone; ``local.py`` and ``s3.py`` implement it. Object stores
have no rename, so the protocol has none either: what must appear at once
is written as one object, and a step's or a checkpoint's commit is a
*put-if-absent* of one object, which one writer wins and any later writer
(a zombie's late write) is refused.

Keys are ``/``-separated, relative to the store's root (the location it was
opened at); a location is a local path or ``s3://bucket/prefix``.

    put            replace the object whole (a reader sees the old or the new, never a mix)
    put_if_absent  create it only if no object has the key: True, or False when one has (nothing changed)
    get            its bytes (FileNotFoundError when absent)
    size           its size, None when absent
    list           every key under a prefix, at any depth, sorted (sizes: with their sizes)
    delete         keys (absent ones are no error); delete_prefix: every key under a prefix
    upload         a local file to a key; download: a key to a local file (written whole, then renamed)
    local_path     the file behind a key when the store is a directory (readers may open it in place)
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

from ftpipeline.objectstore.config import S3Config

SCHEME = "s3://"


class ObjectStore(Protocol):
    @property
    def uri(self) -> str:
        """Where the store's root is (in messages, and to open the same store elsewhere)."""
        ...

    def put(self, key: str, data: bytes) -> None: ...

    def put_if_absent(self, key: str, data: bytes) -> bool: ...

    def get(self, key: str) -> bytes: ...

    def size(self, key: str) -> int | None: ...

    def list(self, prefix: str = "") -> list[str]: ...

    def sizes(self, prefix: str = "") -> dict[str, int]:
        """``list`` with each object's size."""
        ...

    def delete(self, keys: Iterable[str]) -> None: ...

    def delete_prefix(self, prefix: str = "") -> None:
        """Every key under ``prefix`` (all of the store's when empty)."""
        ...

    def upload(self, key: str, path: Path) -> None: ...

    def download(self, key: str, path: Path) -> None: ...

    def local_path(self, key: str) -> Path | None: ...

    def child(self, prefix: str) -> ObjectStore:
        """The store rooted at ``prefix`` of this one."""
        ...


def is_remote(location: str | Path) -> bool:
    """Is ``location`` an object store URI (``s3://...``) rather than a local path?"""
    return str(location).startswith(SCHEME)


def split_uri(uri: str) -> tuple[str, str]:
    """``s3://bucket/a/b`` -> (``bucket``, ``a/b``); a URI with no bucket is refused."""
    if not is_remote(uri):
        raise ValueError(f"{uri!r} is not an {SCHEME} URI")
    bucket, _, prefix = uri[len(SCHEME):].partition("/")
    if not bucket:
        raise ValueError(f"{uri!r} names no bucket")
    return bucket, prefix.strip("/")


def join(location: str | Path, *parts: str) -> str | Path:
    """``location`` and ``parts`` below it, keeping its kind (a Path stays a Path)."""
    if isinstance(location, Path):
        return location.joinpath(*parts)
    return "/".join([location.rstrip("/"), *(p.strip("/") for p in parts)])


def open_store(location: str | Path, config: S3Config | None = None) -> ObjectStore:
    """The store rooted at ``location``: a directory for a path, an S3 bucket's prefix for ``s3://``
    (``config``: the endpoint and keys; by default the environment's, ``config.py``)."""
    if is_remote(location):
        from ftpipeline.objectstore.s3 import S3ObjectStore

        bucket, prefix = split_uri(str(location))
        return S3ObjectStore(bucket, prefix, config or S3Config.from_env())
    from ftpipeline.objectstore.local import LocalObjectStore

    return LocalObjectStore(Path(location))
