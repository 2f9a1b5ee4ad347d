"""The run report in a real browser: a small run with a killed worker, watched live, then its report.html opened.

The browser is Debian's ``chromium``, headless, driven by **selenium** through
Debian's ``chromium-driver``. Why selenium: the driver comes from the same
source package as the browser, so their versions always match, and nothing
is downloaded while the tests run (Playwright pins browser builds of its own
and supports a distribution's chromium only on a best-effort basis).
Selenium also reads the browser's console (``goog:loggingPrefs``), which is
what the first assertion is about: a page with a script error still draws
something.

Skipped, saying why, when chromium, chromium-driver or selenium is missing
(``.ci/run`` installs them).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ftpipeline.embedded.ports import free_port

from .pipelines import clickstream

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")

STEPS, KILL_AT = 8, 4


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if CHROMIUM is None or CHROMEDRIVER is None:
        pytest.skip("no chromium and chromium-driver on PATH (apt-get install chromium chromium-driver)")
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install -e '.[test]')")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1400,1000"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _open(driver: Any, url: str) -> list[dict[str, Any]]:
    """Load ``url``, wait until plotly drew both figures; the console's errors while it did."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get_log("browser")  # what earlier pages logged is not this one's
    driver.get(url)
    WebDriverWait(driver, 60).until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#timeline .main-svg")) > 0
                                    and len(d.find_elements(By.CSS_SELECTOR, "#graph .main-svg")) > 0)
    return [e for e in driver.get_log("browser") if e["level"] in ("SEVERE", "ERROR")]


def _texts(driver: Any, selector: str) -> list[str]:
    from selenium.webdriver.common.by import By

    return [e.get_attribute("textContent") or "" for e in driver.find_elements(By.CSS_SELECTOR, selector)]


def _watch_live(port: int, proc: subprocess.Popen[str], driver: Any) -> dict[str, Any]:
    """While the run goes on: the live page and /timeline.json answer, and the page loads in the browser."""
    base = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + 600
    snap: dict[str, Any] = {}
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            status, body = _get(base + "timeline.json")
        except OSError:  # not listening yet
            time.sleep(0.2)
            continue
        assert status == 200
        snap = json.loads(body)
        if any(s["committed"] is not None for s in snap["steps"]):
            break
        time.sleep(0.2)
    assert snap.get("steps"), "the live server never showed a committed step while the run went on"
    assert snap["ended"] is None and snap["graph"]["stages"][0]["name"] == "events"
    status, page = _get(base)
    assert status == 200 and b"location.reload" in page  # reloads itself while the run goes on
    assert _open(driver, base) == []
    return snap


def test_the_report_of_a_run_with_a_killed_worker_in_a_browser(tmp_path: Path, redis_url: str,
                                                                 browser: Any) -> None:
    pipeline = clickstream(tmp_path, "report", steps=STEPS, rows_per_step=6000, checkpoint_every=3)
    run_dir, port = tmp_path / "run", free_port()
    log = tmp_path / "output.txt"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "ftpipeline.cli", "run", str(pipeline), "--no-progress", "--run-dir", str(run_dir),
             "--redis-url", redis_url, "--steps", str(STEPS), "--kill-at-step", str(KILL_AT), "--ui-port", str(port)],
            stdout=out, stderr=subprocess.STDOUT, text=True, cwd=tmp_path, env=dict(os.environ))
        try:
            _watch_live(port, proc, browser)
            code = proc.wait(timeout=900)
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
                proc.wait(timeout=60)
    output = log.read_text()
    assert code == 0, output[-4000:]
    report = run_dir / "report.html"
    assert f"report: {report.resolve()}" in output.splitlines(), output[-2000:]

    errors = _open(browser, report.resolve().as_uri())
    assert errors == [], errors
    assert len(_texts(browser, ".js-plotly-plot")) == 2  # the graph and the timeline
    labels = _texts(browser, "#timeline .annotation-text")
    assert [t for t in labels if t.startswith("recovery of w")], labels  # the recovery's band is labelled
    # shapes: one band per recovery, one line per checkpoint (every 3 steps: at least one)
    assert len(browser.find_elements("css selector", "#timeline .shapelayer path")) >= 2
    nodes = _texts(browser, "#graph .textpoint")
    assert len(nodes) == 6 and any("(was w" in n for n in nodes), nodes  # the lost worker's channels moved
    headline = _texts(browser, ".figure")
    assert f"{STEPS}steps committed" in headline and "1recovery" in headline, headline
