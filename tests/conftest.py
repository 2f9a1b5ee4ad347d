"""Session-wide test hooks: which long tests run (``rotation.py``), and slow tests named as they end.

A slow test is named as soon as it ends, not only in the closing durations table: a run stopped by
an outer time limit never prints that table, and the line says where the time went.
"""

from __future__ import annotations

import pytest

SLOW_S = 120.0


@pytest.hookimpl(trylast=True)
def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when != "call" or report.duration < SLOW_S:
        return
    print(f"\n[slow {report.duration:.0f}s {report.outcome}] {report.nodeid}", flush=True)


def pytest_report_header() -> str:
    from tests import rotation

    which = "every test (FTPIPELINE_TEST_FULL=1)" if rotation.FULL else f"half {rotation.HALF}"
    return f"long tests: {which}, FTPIPELINE_TEST_ROTATION={rotation.ROTATION} (tests/rotation.py)"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    from tests import rotation

    for item in items:
        why = rotation.skipped_because(item.nodeid)
        if why is not None:
            item.add_marker(pytest.mark.skip(reason=why))
