"""The S3 gateway's version is pinned once: the Dockerfile's build stage takes the same as ``embedded/s3.py``."""

from __future__ import annotations

import re
from pathlib import Path

from ftpipeline.embedded import s3

ROOT = Path(__file__).resolve().parents[3]


def test_the_image_builds_the_version_the_runtime_pins() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    [version] = re.findall(r"^ARG VERSITYGW=(\S+)$", dockerfile, re.M)
    assert version == s3.VERSION
    assert "COPY --from=s3-gateway /versitygw /usr/local/bin/versitygw" in dockerfile
