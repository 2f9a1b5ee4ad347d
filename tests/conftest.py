"""Session-wide test hooks: which long tests run (``rotation.py``), and slow tests named as they end.

A slow or failed test is named as soon as it ends (a failure with its first line), not only in the
closing tables: a run stopped by an outer time limit never prints them.
"""

from __future__ import annotations

import pytest

SLOW_S = 120.0


@pytest.hookimpl(trylast=True)
def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.failed:  # what failed, at once: the summary at the end may never be printed
        crash = getattr(report.longrepr, "reprcrash", None)
        why = crash.message.splitlines()[0][:500] if crash is not None and crash.message else ""
        print(f"\n[failed {report.when} {report.duration:.0f}s] {report.nodeid}: {why}", flush=True)
    elif report.when == "call" and report.duration >= SLOW_S:
        print(f"\n[slow {report.duration:.0f}s {report.outcome}] {report.nodeid}", flush=True)


def pytest_report_header() -> str:
    from tests import rotation

    which = "every test (FTPIPELINE_TEST_FULL=1)" if rotation.FULL else f"part {rotation.PART}"
    return f"long tests: {which}, FTPIPELINE_TEST_ROTATION={rotation.ROTATION} (tests/rotation.py)"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    from tests import rotation

    for item in items:
        why = rotation.skipped_because(item.nodeid)
        if why is not None:
            item.add_marker(pytest.mark.skip(reason=why))
