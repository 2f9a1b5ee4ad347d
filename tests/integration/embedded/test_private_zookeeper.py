"""The private ZooKeeper of ``ftpipeline run`` is closed: loopback only, and the pipeline's credentials on every znode.

The session is opened as ``ftpipeline run`` opens it (``open_session`` with a
run directory and no ZooKeeper address), so the server, its ACLs and the
connect string the sidecars get are the ones a local run has. Then a client
tries what a stranger on the machine or the network would: connect through
the machine's own network address, and, over loopback without credentials,
list, read and create under the pipeline's path. Each is refused, and the
pipeline's znodes are the same afterwards.
"""

from __future__ import annotations

import dataclasses
import json
import socket
import subprocess
from pathlib import Path

import pytest
from kazoo.exceptions import NoAuthError

from ftpipeline.commandlog.zkclient import connect as zk_connect
from ftpipeline.commandlog.zkclient import parse_connect
from ftpipeline.commandlog.zklog import ROOT, base_path
from ftpipeline.coordinator.session import open_session
from ftpipeline.spec.load import load_pipeline

from ..commandlog.test_zkaccess import _snapshot

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "clickstream" / "pipeline.yaml"


def _network_address() -> str | None:
    """An IPv4 address of this machine that is not on the loopback interface."""
    out = subprocess.run(["ip", "-j", "-4", "addr"], capture_output=True, text=True, check=False).stdout or "[]"
    return next((a["local"] for i in json.loads(out) if i.get("ifname") != "lo"
                 for a in i.get("addr_info", []) if not a["local"].startswith("127.")), None)


def test_a_stranger_cannot_reach_or_touch_the_private_zookeeper(tmp_path: Path, redis_url: str,
                                                                 pipeline_name: str) -> None:
    spec = dataclasses.replace(load_pipeline(EXAMPLE), name=pipeline_name, identity=pipeline_name,
                               redis_url=redis_url, zookeeper=None)
    assert spec.needs_zookeeper
    session = open_session(spec, resuming=False, private_dir=tmp_path)
    try:
        assert session.zookeeper is not None and session.zk is not None
        parts = parse_connect(session.zookeeper)
        assert parts.identity is not None, "the sidecars must get the pipeline's credentials"
        host, port = parts.hosts.rsplit(":", 1)
        assert host == "127.0.0.1"
        base = base_path(spec.store_key)
        session.zk.create(f"{base}/probe", b"the pipeline's own")
        before = _snapshot(session.zk, base)

        address = _network_address()
        if address is None:
            pytest.skip("this machine has no non-loopback IPv4 address to try")
        with pytest.raises(OSError):  # nothing listens there: refused, not merely unauthenticated
            socket.create_connection((address, int(port)), timeout=3).close()

        stranger = zk_connect(parts.hosts, timeout_s=4.0)  # no credentials
        try:
            for attempt in (lambda: stranger.get_children(base), lambda: stranger.get(f"{base}/probe"),
                            lambda: stranger.create(f"{base}/squat", b"x"), lambda: stranger.get_children(ROOT),
                            lambda: stranger.create("/elsewhere", b"x"),
                            lambda: stranger.set(f"{base}/probe", b"overwritten")):
                with pytest.raises(NoAuthError):
                    attempt()
        finally:
            stranger.stop()
            stranger.close()
        assert _snapshot(session.zk, base) == before
        assert not session.zk.exists("/elsewhere")
    finally:
        session.close()
