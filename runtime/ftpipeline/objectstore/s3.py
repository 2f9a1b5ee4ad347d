"""The object store protocol over an S3-compatible bucket, through ``obstore`` (Rust's ``object_store``).

Why this client: ``bench/object_clients.py`` put it against boto3 and
pyarrow's ``S3FileSystem`` on the same server: the fastest at small puts,
listing and conditional puts (2-3x boto3) at a quarter of boto3's CPU, and
within 0.85-0.91 of pyarrow's file transfers, which cannot put
conditionally. ``put_if_absent`` is a PUT with ``If-None-Match: *``; the
server answers 412 when the key exists (AWS S3 since 2024, and the embedded
server, ``embedded/s3.py``), which obstore raises as ``AlreadyExistsError``
or, from some servers, ``PreconditionError``: both mean "another writer
was first". Large files go up as multipart uploads and come down in
chunks, neither held whole in memory. Its errors reach callers as the
``OSError``s a directory would raise (``StoreError``, ``PermissionError``,
``FileNotFoundError``), so code that outlives an unwritable storage (an
aborted checkpoint, not a failed run) does so on both.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import obstore
from obstore.exceptions import (AlreadyExistsError, BaseError, PermissionDeniedError, PreconditionError,
                                UnauthenticatedError)
from obstore.store import S3Store

from ftpipeline.objectstore.base import SCHEME, ObjectStore
from ftpipeline.objectstore.config import S3Config

CHUNK = 16 << 20


class StoreError(OSError):
    """The store failed a request (unreachable, refused, an error it answered)."""


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]


def _client(bucket: str, config: S3Config) -> S3Store:
    options: dict[str, Any] = {}
    if config.endpoint and config.endpoint.startswith("http://"):
        options["allow_http"] = True
    if config.ca_file:
        options["root_certificate"] = Path(config.ca_file).read_bytes()
    kwargs: dict[str, Any] = {"region": config.region, "virtual_hosted_style_request": not config.path_style,
                              "client_options": options}
    if config.endpoint:
        kwargs["endpoint"] = config.endpoint
    if config.access_key and config.secret_key:
        kwargs.update(access_key_id=config.access_key, secret_access_key=config.secret_key)
        if config.session_token:
            kwargs["session_token"] = config.session_token
    return S3Store(bucket, **kwargs)


class S3ObjectStore:
    def __init__(self, bucket: str, prefix: str, config: S3Config, client: S3Store | None = None) -> None:
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.config = config
        self._store = client or _client(bucket, config)

    @property
    def uri(self) -> str:
        return f"{SCHEME}{self.bucket}/{self.prefix}" if self.prefix else f"{SCHEME}{self.bucket}"

    def _key(self, key: str) -> str:
        if key.startswith("/") or ".." in key.split("/"):
            raise ValueError(f"object key {key!r} leaves the store")
        return f"{self.prefix}/{key}" if self.prefix else key

    def _relative(self, key: str) -> str:
        return key[len(self.prefix) + 1:] if self.prefix else key

    @contextmanager
    def _errors(self, key: str) -> Iterator[None]:
        """obstore's errors as the OSError a directory's would be (callers that survive an unwritable storage
        catch OSError on both): absent -> FileNotFoundError, refused -> PermissionError, else StoreError."""
        try:
            yield
        except FileNotFoundError as e:  # obstore's NotFoundError is one
            raise FileNotFoundError(f"{self.uri}/{key}: not found") from e
        except (PermissionDeniedError, UnauthenticatedError) as e:
            raise PermissionError(f"{self.uri}/{key}: {_first_line(e)}") from e
        except BaseError as e:
            raise StoreError(f"{self.uri}/{key}: {_first_line(e)}") from e

    def put(self, key: str, data: bytes) -> None:
        with self._errors(key):
            obstore.put(self._store, self._key(key), data)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        with self._errors(key):
            try:
                obstore.put(self._store, self._key(key), data, mode="create")
                return True
            except (AlreadyExistsError, PreconditionError):
                return False

    def get(self, key: str) -> bytes:
        with self._errors(key):
            return bytes(obstore.get(self._store, self._key(key)).bytes())

    def size(self, key: str) -> int | None:
        try:
            with self._errors(key):
                return int(obstore.head(self._store, self._key(key))["size"])
        except FileNotFoundError:
            return None

    def list(self, prefix: str = "") -> list[str]:
        return sorted(self.sizes(prefix))

    def sizes(self, prefix: str = "") -> dict[str, int]:
        # object_store lists whole path segments ("a/b" finds "a/b/c", not "a/bc"): list the directory a
        # prefix ends in, then keep the keys that start with it
        full = self._key(prefix) if prefix else self.prefix
        directory = full.rstrip("/") if not prefix or prefix.endswith("/") else full.rpartition("/")[0]
        with self._errors(prefix):
            found = {self._relative(o["path"]): int(o["size"])
                     for batch in obstore.list(self._store, prefix=directory or None) for o in batch}
        return {k: n for k, n in found.items() if k.startswith(prefix)}

    def delete(self, keys: Iterable[str]) -> None:
        wanted = list(keys)
        for start in range(0, len(wanted), 1000):
            batch = wanted[start:start + 1000]
            try:
                obstore.delete(self._store, [self._key(k) for k in batch])
            except BaseError:
                # some servers answer a bulk delete of a key already gone (another deleter was first) with an
                # error for that key, where S3 says nothing: one at a time, an absent key is no error
                for key in batch:
                    try:
                        with self._errors(key):
                            obstore.delete(self._store, self._key(key))
                    except FileNotFoundError:
                        continue

    def delete_prefix(self, prefix: str = "") -> None:
        self.delete(self.list(prefix))

    def upload(self, key: str, path: Path) -> None:
        with self._errors(key):
            obstore.put(self._store, self._key(key), path, chunk_size=CHUNK)

    def download(self, key: str, path: Path) -> None:
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            with self._errors(key), open(tmp, "wb") as f:
                for chunk in obstore.get(self._store, self._key(key)).stream(min_chunk_size=CHUNK):
                    f.write(memoryview(chunk))
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        os.replace(tmp, path)

    def local_path(self, key: str) -> Path | None:
        return None

    def child(self, prefix: str) -> ObjectStore:
        return S3ObjectStore(self.bucket, self._key(prefix.strip("/")), self.config, self._store)
