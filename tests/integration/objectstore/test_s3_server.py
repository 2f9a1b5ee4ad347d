"""The embedded S3 server as a pipeline meets it: killed and restarted, and asked by the wrong keys."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from ftpipeline.embedded.s3 import EmbeddedS3
from ftpipeline.objectstore.base import open_store


def test_a_killed_server_restarts_with_its_objects_address_and_keys(tmp_path: Path) -> None:
    server = EmbeddedS3(tmp_path / "s3").start()
    try:
        server.create_bucket("ckpt")
        store = open_store("s3://ckpt/p", server.config)
        assert store.put_if_absent("epoch-1/manifest.json", b"{}")
        endpoint = server.endpoint
        server.kill()
        with pytest.raises(Exception):  # noqa: B017 -- whatever the client raises while nothing listens
            store.get("epoch-1/manifest.json")
        server.start()
        assert server.endpoint == endpoint
        assert store.get("epoch-1/manifest.json") == b"{}"
        assert not store.put_if_absent("epoch-1/manifest.json", b"late")  # the commit still holds
        assert store.get("epoch-1/manifest.json") == b"{}"
    finally:
        server.stop()


def test_wrong_keys_are_refused_and_change_nothing(s3_server: EmbeddedS3, s3_bucket: str) -> None:
    good = open_store(f"s3://{s3_bucket}", s3_server.config)
    good.put("output/step=1", b"rows")
    bad = open_store(f"s3://{s3_bucket}", dataclasses.replace(s3_server.config, secret_key="not-the-secret"))
    for attempt in (lambda: bad.put("output/step=1", b"forged"), lambda: bad.put_if_absent("output/step=2", b"x"),
                    lambda: bad.get("output/step=1"), lambda: bad.list(), lambda: bad.delete(["output/step=1"])):
        with pytest.raises(Exception) as refused:
            attempt()
        assert not isinstance(refused.value, FileNotFoundError)
    assert good.list() == ["output/step=1"]
    assert good.get("output/step=1") == b"rows"
