"""The table of long tests (tests/rotation.py) names tests that exist, and each run takes one part."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import rotation

ROOT = Path(__file__).resolve().parents[2]


def test_every_entry_names_a_collected_test() -> None:
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                          "tests/chaos", "tests/integration", "tests/e2e"], cwd=ROOT, capture_output=True, text=True,
                         env={**os.environ, "FTPIPELINE_TEST_FULL": "1"}, timeout=300)
    ids = [line for line in out.stdout.splitlines() if "::" in line]
    assert len(ids) > 100, out.stdout[-2000:] + out.stderr[-2000:]
    stale = [prefix for prefix in rotation.GROUPS if not any(i.startswith(prefix) for i in ids)]
    assert not stale, f"tests/rotation.py names tests that no longer exist: {stale}"


def test_each_run_takes_one_part_and_full_runs_every_one(monkeypatch: pytest.MonkeyPatch) -> None:
    parts = {name: [p for p, g in rotation.GROUPS.items() if g == name] for name in (*rotation.PARTS, "full")}
    assert all(parts.values())
    assert set(rotation.GROUPS.values()) == set(parts)
    monkeypatch.setattr(rotation, "FULL", False)
    for part in rotation.PARTS:
        monkeypatch.setattr(rotation, "PART", part)
        assert all(rotation.skipped_because(p) is None for p in parts[part])
        for other in set(rotation.PARTS) - {part}:
            assert all("part" in (rotation.skipped_because(p) or "") for p in parts[other])
        assert all("FTPIPELINE_TEST_FULL" in (rotation.skipped_because(p) or "") for p in parts["full"])
        assert rotation.skipped_because("tests/integration/test_oracle.py::anything") is None
    monkeypatch.setattr(rotation, "FULL", True)
    assert all(rotation.skipped_because(p) is None for p in rotation.GROUPS)
