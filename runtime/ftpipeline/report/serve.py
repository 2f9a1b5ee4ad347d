"""``ftpipeline run --ui-port PORT``: the run report, live, while the run goes on.

Why: ``report.html`` is written when a run ends; someone watching a long
run, or a recovery as it happens, wants the same page now. A small HTTP
server in a daemon thread renders the page from the timeline's current
snapshot on every request; the page reloads itself every few seconds and
stops once the run has ended. It listens on 127.0.0.1 only: the page shows
the pipeline's layout and errors, which is nobody else's business, and it
has no authentication.

Routes: ``/`` (the page), ``/timeline.json`` (the snapshot itself, for
scripts), ``/plotly.min.js`` (served from the installed plotly, so the page
needs no network and a reload does not fetch 4 MB of script again).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ftpipeline.report.render import PLOTLY_JS_PATH, page
from ftpipeline.report.timeline import Timeline

__all__ = ["LiveServer", "serve"]

log = logging.getLogger("ftpipeline.report")

HOST = "127.0.0.1"


class LiveServer:
    """The running server: its ``url``; ``summary`` (the run's figures, once known) joins the page."""

    def __init__(self, timeline: Timeline, port: int) -> None:
        self.timeline = timeline
        self.summary: Mapping[str, Any] | None = None
        self._plotly_js: bytes | None = None
        self._httpd = ThreadingHTTPServer((HOST, port), _handler(self))
        self._httpd.daemon_threads = True
        self.port = int(self._httpd.server_address[1])
        self.url = f"http://{HOST}:{self.port}/"
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="report-ui", daemon=True)

    def start(self) -> LiveServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def plotly_js(self) -> bytes:
        if self._plotly_js is None:
            from plotly.offline import get_plotlyjs

            self._plotly_js = get_plotlyjs().encode()
        return self._plotly_js

    def respond(self, path: str) -> tuple[int, str, bytes]:
        """(status, content type, body) for a GET of ``path``."""
        route = path.split("?", 1)[0]
        if route in ("/", "/index.html", "/report.html"):
            body = page(self.timeline.snapshot(), self.summary, live=True)
            return 200, "text/html; charset=utf-8", body.encode()
        if route == "/timeline.json":
            return 200, "application/json", json.dumps(self.timeline.snapshot()).encode()
        if route == PLOTLY_JS_PATH:
            return 200, "text/javascript; charset=utf-8", self.plotly_js()
        return 404, "text/plain; charset=utf-8", b"not found\n"


def _handler(server: LiveServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (the name http.server calls)
            try:
                status, content_type, body = server.respond(self.path)
            except Exception:  # a bug in the report must not look like a dead run: say so, keep serving
                log.exception("the live report failed to render")
                status, content_type, body = 500, "text/plain; charset=utf-8", b"the report failed to render\n"
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            cache = "max-age=3600" if self.path == PLOTLY_JS_PATH else "no-store"
            self.send_header("Cache-Control", cache)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (http.server's signature)
            log.debug("report ui: " + format, *args)

    return Handler


def serve(timeline: Timeline, port: int) -> LiveServer:
    """Serve ``timeline``'s live report on 127.0.0.1:``port`` (0: any free port) from a daemon thread."""
    return LiveServer(timeline, port).start()
