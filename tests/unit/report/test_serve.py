"""The live page's server: the page, the snapshot as JSON and plotly.js, on 127.0.0.1 only."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from ftpipeline.report.serve import serve
from ftpipeline.report.timeline import Timeline
from ftpipeline.spec.model import PipelineSpec

from .conftest import Clock, play


def _get(url: str) -> tuple[int, str, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.headers["Content-Type"], response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], exc.read()


def test_the_page_the_snapshot_and_plotly_js_as_the_run_goes_on(spec: PipelineSpec, clock: Clock) -> None:
    timeline = Timeline(spec, clock=clock)
    server = serve(timeline, 0)
    try:
        assert server.url.startswith("http://127.0.0.1:") and server.port > 0
        status, kind, body = _get(server.url + "timeline.json")
        assert status == 200 and kind == "application/json" and json.loads(body)["steps"] == []
        play(timeline, clock)
        snap = json.loads(_get(server.url + "timeline.json")[2])
        assert len(snap["steps"]) == 5 and snap["recoveries"][0]["worker"] == "w1"
        status, kind, body = _get(server.url)
        assert status == 200 and kind.startswith("text/html")
        assert b"recovery of w1 (lineage)" in body and b"location.reload" in body
        status, kind, body = _get(server.url + "plotly.min.js")
        assert status == 200 and kind.startswith("text/javascript") and len(body) > 1_000_000
        assert _get(server.url + "nothing-here")[0] == 404
        server.summary = {"committed": 5}
        timeline.finish("succeeded")
        body = _get(server.url + "report.html")[2]
        assert b"location.reload" not in body and b"<td>committed</td><td>5</td>" in body
    finally:
        server.stop()


def test_a_page_that_fails_to_render_is_a_500_and_the_server_keeps_serving(spec: PipelineSpec) -> None:
    timeline = Timeline(spec)
    server = serve(timeline, 0)
    try:
        broken = server.timeline.snapshot

        def fail() -> dict[str, object]:
            raise RuntimeError("boom")

        server.timeline.snapshot = fail  # type: ignore[method-assign]
        assert _get(server.url)[0] == 500
        server.timeline.snapshot = broken  # type: ignore[method-assign]
        assert _get(server.url)[0] == 200
    finally:
        server.stop()


def test_a_port_in_use_is_an_os_error(spec: PipelineSpec) -> None:
    first = serve(Timeline(spec), 0)
    try:
        with pytest.raises(OSError):
            serve(Timeline(spec), first.port)
    finally:
        first.stop()
