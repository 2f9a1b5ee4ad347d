"""Where the store is and how to sign for it: read from the standard variables, written back the same."""

from __future__ import annotations

from pathlib import Path

import pytest

from ftpipeline.objectstore.base import is_remote, join, split_uri
from ftpipeline.objectstore.config import S3Config


def test_the_environment_names_endpoint_region_keys_and_style() -> None:
    c = S3Config.from_env({"AWS_ENDPOINT_URL": "http://store:7070", "AWS_REGION": "eu-west-1",
                           "AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"})
    assert (c.endpoint, c.region, c.access_key, c.secret_key, c.path_style) == ("http://store:7070", "eu-west-1",
                                                                               "k", "s", True)
    assert S3Config.from_env(c.to_env()) == c
    aws = S3Config.from_env({})
    assert aws.endpoint is None and not aws.path_style and aws.region == "us-east-1"
    s3_only = S3Config.from_env({"AWS_ENDPOINT_URL_S3": "https://a", "AWS_ENDPOINT_URL": "https://b",
                                 "FTPIPELINE_S3_PATH_STYLE": "false"})
    assert s3_only.endpoint == "https://a" and not s3_only.path_style


def test_a_path_style_that_is_no_boolean_is_named() -> None:
    with pytest.raises(ValueError, match="FTPIPELINE_S3_PATH_STYLE"):
        S3Config.from_env({"FTPIPELINE_S3_PATH_STYLE": "yes"})


def test_uris_and_paths() -> None:
    assert is_remote("s3://b/p") and not is_remote("/data/out") and not is_remote(Path("s3:/x"))
    assert split_uri("s3://bucket/a/b/") == ("bucket", "a/b")
    assert split_uri("s3://bucket") == ("bucket", "")
    with pytest.raises(ValueError, match="names no bucket"):
        split_uri("s3:///a")
    assert join("s3://b/p/", "epoch-1", "x") == "s3://b/p/epoch-1/x"
    assert join(Path("/d"), "x") == Path("/d/x")
