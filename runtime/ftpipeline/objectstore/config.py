"""Where an S3-compatible store is and how to sign for it: read from the standard AWS variables, never a spec.

Why: credentials must not be literals in a pipeline's YAML. On Kubernetes the
operator puts the keys of ``spec.objectStore.secretRef`` into the workers'
environment; ``ftpipeline run`` reads the same variables, or starts a
private server and sets them (``embedded/s3.py``). The names are the ones
AWS's own SDKs and the Hadoop S3A connector's users know:

    AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL   the endpoint (absent: AWS itself)
    AWS_REGION (or AWS_DEFAULT_REGION)        the region (absent: us-east-1)
    AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY  the keys (and AWS_SESSION_TOKEN)
    AWS_CA_BUNDLE                             a CA file for a private endpoint's TLS
    FTPIPELINE_S3_PATH_STYLE                  true: bucket in the path, as most in-cluster servers
                                              want (the default when an endpoint is set); false: in the host
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

ENDPOINT_VARS = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
PATH_STYLE_VAR = "FTPIPELINE_S3_PATH_STYLE"


@dataclass(frozen=True)
class S3Config:
    endpoint: str | None = None     # None: AWS's own endpoint for the region
    region: str = "us-east-1"
    access_key: str | None = None
    secret_key: str | None = None
    session_token: str | None = None
    path_style: bool = True
    ca_file: str | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> S3Config:
        env = os.environ if env is None else env
        endpoint = next((env[v] for v in ENDPOINT_VARS if env.get(v)), None)
        style = env.get(PATH_STYLE_VAR, "").strip().lower()
        if style not in ("", "true", "false"):
            raise ValueError(f"{PATH_STYLE_VAR}: {style!r} is neither true nor false")
        return cls(endpoint=endpoint, region=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1",
                   access_key=env.get("AWS_ACCESS_KEY_ID") or None, secret_key=env.get("AWS_SECRET_ACCESS_KEY") or None,
                   session_token=env.get("AWS_SESSION_TOKEN") or None,
                   path_style=(style == "true") if style else endpoint is not None,
                   ca_file=env.get("AWS_CA_BUNDLE") or None)

    def to_env(self) -> dict[str, str]:
        """The variables ``from_env`` reads back (a worker process started with them reaches the same store)."""
        env = {"AWS_REGION": self.region, PATH_STYLE_VAR: "true" if self.path_style else "false"}
        for name, value in (("AWS_ENDPOINT_URL", self.endpoint), ("AWS_ACCESS_KEY_ID", self.access_key),
                            ("AWS_SECRET_ACCESS_KEY", self.secret_key), ("AWS_SESSION_TOKEN", self.session_token),
                            ("AWS_CA_BUNDLE", self.ca_file)):
            if value:
                env[name] = value
        return env


def storage_options(config: S3Config | None) -> dict[str, str]:
    """What delta-rs needs to reach a table in a bucket: the endpoint and keys of ``config`` (the
    environment's by default), and commits by conditional put (``If-None-Match: *``, which AWS S3 and the
    embedded server honour), so that no lock table is needed."""
    config = config or S3Config.from_env()
    options = {"AWS_REGION": config.region, "conditional_put": "etag",
               "aws_virtual_hosted_style_request": "false" if config.path_style else "true",
               # a release answers within the coordinator's call (30 s), failing rather than retrying past it
               "timeout": "15s", "connect_timeout": "5s", "max_retries": "2", "retry_timeout": "20s"}
    for name, value in (("AWS_ENDPOINT_URL", config.endpoint), ("AWS_ACCESS_KEY_ID", config.access_key),
                        ("AWS_SECRET_ACCESS_KEY", config.secret_key), ("AWS_SESSION_TOKEN", config.session_token)):
        if value:
            options[name] = value
    if config.endpoint and config.endpoint.startswith("http://"):
        options["AWS_ALLOW_HTTP"] = "true"
    return options
