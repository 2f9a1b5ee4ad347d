"""The store the protocol's tests run on: a directory, and a bucket's prefix on the session's real S3 server."""

from __future__ import annotations

from pathlib import Path

import pytest

from ftpipeline.embedded.s3 import EmbeddedS3
from ftpipeline.objectstore.base import ObjectStore, open_store


@pytest.fixture(params=["local", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> ObjectStore:
    if request.param == "local":
        return open_store(tmp_path / "root")
    server: EmbeddedS3 = request.getfixturevalue("s3_server")
    bucket: str = request.getfixturevalue("s3_bucket")
    return open_store(f"s3://{bucket}/some/prefix", server.config)
