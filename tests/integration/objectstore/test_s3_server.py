"""The embedded S3 server as a pipeline meets it: killed and restarted, and asked by the wrong keys."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from ftpipeline.embedded.s3 import BucketTaken, EmbeddedS3
from ftpipeline.objectstore.base import ObjectStore, open_store


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


def test_each_user_reaches_its_own_buckets_alone(tmp_path: Path) -> None:
    """The boundary between two pipelines' keys on one store (the chart's): the other's bucket is refused, whatever
    the request, and left as it was; a bucket already owned cannot be taken."""
    with EmbeddedS3(tmp_path / "s3", users=True) as server:
        admin = server.admin()
        admin.ensure_user("pipeline-a", "secret-of-a-123")
        admin.ensure_user("pipeline-b", "secret-of-b-123")
        admin.ensure_bucket("bucket-a", "pipeline-a")
        admin.ensure_bucket("bucket-a", "pipeline-a")  # again: nothing to do
        admin.ensure_bucket("bucket-b", "pipeline-b")
        with pytest.raises(BucketTaken, match="bucket-a"):
            admin.ensure_bucket("bucket-a", "pipeline-b")

        def as_user(user: str, secret: str, bucket: str) -> ObjectStore:
            return open_store(f"s3://{bucket}/p", dataclasses.replace(server.config, access_key=user, secret_key=secret))

        a = as_user("pipeline-a", "secret-of-a-123", "bucket-a")
        a.put("epoch-1/manifest.json", b"{}")
        b_on_a = as_user("pipeline-b", "secret-of-b-123", "bucket-a")
        for attempt in (lambda: b_on_a.get("epoch-1/manifest.json"), lambda: b_on_a.put("epoch-1/manifest.json", b"x"),
                        lambda: b_on_a.put_if_absent("epoch-2/manifest.json", b"x"), lambda: b_on_a.list(),
                        lambda: b_on_a.delete(["epoch-1/manifest.json"])):
            with pytest.raises(Exception) as refused:
                attempt()
            assert not isinstance(refused.value, FileNotFoundError)
        assert a.list() == ["epoch-1/manifest.json"] and a.get("epoch-1/manifest.json") == b"{}"
        assert admin.bucket_owners() == {"bucket-a": "pipeline-a", "bucket-b": "pipeline-b"}
        admin.delete_user("pipeline-b")
        assert admin.users() == {"pipeline-a"}
        with pytest.raises(Exception):  # noqa: B017 -- a deleted user's keys no longer sign
            as_user("pipeline-b", "secret-of-b-123", "bucket-b").list()


def test_an_https_endpoint_of_a_private_ca_is_trusted_through_the_ca_file_alone(tmp_path: Path) -> None:
    """As ``spec.objectStore.caSecretRef`` gives it (AWS_CA_BUNDLE): trusted with the CA, refused without it."""
    from ftpipeline.worker.tls import generate

    certs = generate("object-store", ("localhost",)).write(tmp_path / "tls")
    with EmbeddedS3(tmp_path / "s3", tls_dir=certs) as server:
        server.create_bucket("secure")
        assert server.endpoint.startswith("https://")
        store = open_store("s3://secure/p", server.config)
        assert store.put_if_absent("k", b"v") and store.get("k") == b"v"
        untrusting = open_store("s3://secure/p", dataclasses.replace(server.config, ca_file=None))
        with pytest.raises(OSError):
            untrusting.get("k")
