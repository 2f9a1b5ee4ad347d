"""The object store protocol over a local directory (``ftpipeline run``, or a volume every worker mounts).

A key is a file under the root. ``put`` writes a temporary file and renames
it over the key, so a reader sees the old or the new object whole;
``put_if_absent`` writes the temporary file and hard-links it to the key,
which the kernel refuses when the name exists: one writer wins, on a local
disk and on NFS alike. Temporary files start with ``.`` and end ``.tmp``;
``list`` skips them.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable
from pathlib import Path

from ftpipeline.objectstore.base import ObjectStore


def _tmp_for(path: Path) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}.{id(path):x}.tmp")


class LocalObjectStore:
    def __init__(self, root: Path) -> None:
        self.root = root

    @property
    def uri(self) -> str:
        return str(self.root)

    def _path(self, key: str) -> Path:
        if key.startswith("/") or ".." in key.split("/"):
            raise ValueError(f"object key {key!r} leaves the store")
        return self.root / key

    def put(self, key: str, data: bytes) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = _tmp_for(path)
        tmp.write_bytes(data)
        os.replace(tmp, path)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = _tmp_for(path)
        tmp.write_bytes(data)
        try:
            os.link(tmp, path)
            return True
        except FileExistsError:
            return False
        finally:
            tmp.unlink(missing_ok=True)

    def get(self, key: str) -> bytes:
        return self._path(key).read_bytes()

    def size(self, key: str) -> int | None:
        try:
            return self._path(key).stat().st_size
        except FileNotFoundError:
            return None

    def list(self, prefix: str = "") -> list[str]:
        # the directory the prefix ends in ("s/b" may name "s/b/c" and "s/bb")
        directory = prefix.rstrip("/") if prefix.endswith("/") else prefix.rpartition("/")[0]
        base = self._path(directory) if directory else self.root
        if not base.is_dir():
            return []
        keys = []
        for directory, _, files in os.walk(base):
            for name in files:
                if name.startswith(".") and name.endswith(".tmp"):
                    continue
                keys.append(str((Path(directory) / name).relative_to(self.root)))
        return sorted(k for k in keys if k.startswith(prefix))

    def sizes(self, prefix: str = "") -> dict[str, int]:
        out = {}
        for key in self.list(prefix):
            try:
                out[key] = self._path(key).stat().st_size
            except FileNotFoundError:
                continue
        return out

    def delete(self, keys: Iterable[str]) -> None:
        """The files (their directories stay: a writer may be about to put a file there)."""
        for key in keys:
            self._path(key).unlink(missing_ok=True)

    def delete_prefix(self, prefix: str = "") -> None:
        if not prefix or prefix.endswith("/"):
            shutil.rmtree(self._path(prefix.rstrip("/")) if prefix else self.root, ignore_errors=True)
        else:
            self.delete(self.list(prefix))

    def upload(self, key: str, path: Path) -> None:
        target = self._path(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = _tmp_for(target)
        shutil.copyfile(path, tmp)
        os.replace(tmp, target)

    def download(self, key: str, path: Path) -> None:
        tmp = _tmp_for(path)
        shutil.copyfile(self._path(key), tmp)
        os.replace(tmp, path)

    def local_path(self, key: str) -> Path | None:
        return self._path(key)

    def child(self, prefix: str) -> ObjectStore:
        return LocalObjectStore(self._path(prefix.strip("/")))
