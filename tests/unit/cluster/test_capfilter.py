"""capfilter: the runtime filter that keeps containers within the capabilities this machine's root holds."""

from __future__ import annotations

import json
from pathlib import Path

from tests.e2e.cluster import capfilter


def test_only_the_missing_capabilities_leave_every_set() -> None:
    process: dict[str, object] = {"capabilities": {
        "bounding": ["CAP_CHOWN", "CAP_SYS_RESOURCE", "CAP_NET_ADMIN"],
        "effective": ["CAP_SYS_RESOURCE"],
        "ambient": [],
    }}
    assert capfilter.filter_process(process, {"CAP_SYS_RESOURCE"})
    assert process["capabilities"] == {"bounding": ["CAP_CHOWN", "CAP_NET_ADMIN"], "effective": [], "ambient": []}
    assert not capfilter.filter_process(process, {"CAP_SYS_RESOURCE"})  # nothing left to drop: untouched


def test_a_bundle_and_an_exec_process_are_rewritten_in_place(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"ociVersion": "1.0.2", "process": {"capabilities": {"bounding": ["CAP_BPF", "CAP_KILL"]}}}))
    capfilter.rewrite(config, True, {"CAP_BPF"})
    assert json.loads(config.read_text())["process"]["capabilities"] == {"bounding": ["CAP_KILL"]}
    process = tmp_path / "process.json"
    process.write_text(json.dumps({"args": ["true"], "capabilities": {"permitted": ["CAP_BPF"]}}))
    capfilter.rewrite(process, False, {"CAP_BPF"})
    assert json.loads(process.read_text()) == {"args": ["true"], "capabilities": {"permitted": []}}


def test_options_are_read_in_both_spellings() -> None:
    args = ["--root", "/run/runc", "create", "--bundle=/b", "--pid-file", "/p", "id"]
    assert capfilter.option(args, "--bundle", "-b") == "/b"
    assert capfilter.option(["exec", "-p", "/tmp/proc.json", "id"], "--process", "-p") == "/tmp/proc.json"
    assert capfilter.option(["start", "id"], "--bundle", "-b") is None


def test_this_machine_s_missing_capabilities_are_known_names() -> None:
    assert capfilter.missing() <= {f"CAP_{n}" for n in capfilter.NAMES}
