"""The table of long tests (tests/rotation.py) names tests that exist, and each run skips one half."""

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
                          "tests/chaos", "tests/integration"], cwd=ROOT, capture_output=True, text=True,
                         env={**os.environ, "FTPIPELINE_TEST_FULL": "1"}, timeout=300)
    ids = [line for line in out.stdout.splitlines() if "::" in line]
    assert len(ids) > 100, out.stdout[-2000:] + out.stderr[-2000:]
    stale = [prefix for prefix in rotation.GROUPS if not any(i.startswith(prefix) for i in ids)]
    assert not stale, f"tests/rotation.py names tests that no longer exist: {stale}"


def test_the_two_halves_skip_each_other_and_full_runs_every_one(monkeypatch: pytest.MonkeyPatch) -> None:
    halves = {name: [p for p, g in rotation.GROUPS.items() if g == name] for name in ("A", "B", "full")}
    assert all(halves.values())
    monkeypatch.setattr(rotation, "FULL", False)
    for half, other in (("A", "B"), ("B", "A")):
        monkeypatch.setattr(rotation, "HALF", half)
        assert all(rotation.skipped_because(p) is None for p in halves[half])
        assert all("half" in (rotation.skipped_because(p) or "") for p in halves[other])
        assert all("FTPIPELINE_TEST_FULL" in (rotation.skipped_because(p) or "") for p in halves["full"])
        assert rotation.skipped_because("tests/integration/test_oracle.py::anything") is None
    monkeypatch.setattr(rotation, "FULL", True)
    assert all(rotation.skipped_because(p) is None for p in rotation.GROUPS)
