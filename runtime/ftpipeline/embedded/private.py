"""Files only their owner may read: keys, key stores, ACLs. One way to write them, so none is ever briefly
readable by others (created with mode 0600, never chmod-ed after the write)."""

from __future__ import annotations

import os
from pathlib import Path


def write_private(path: Path, data: bytes) -> Path:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return path


def pem_keystore(tls_dir: Path, path: Path) -> Path:
    """A Java server's PEM key store (ZooKeeper, Kafka): the key of ``tls_dir/tls.key`` as PKCS#8, which is the
    only form their PEM readers take, then the certificate chain of ``tls_dir/tls.crt``; rewritten on every
    start, so a renewed Secret applies."""
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_private_key((tls_dir / "tls.key").read_bytes(), password=None)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()) + (tls_dir / "tls.crt").read_bytes()
    return write_private(path, pem)
