"""Structured logs: one JSON object per line, with the fields passed as ``extra``.

Workers log to stderr (a file per process in local mode, the container log
on Kubernetes); a log line is an event with named fields rather than prose,
so ``jq`` or a log pipeline can follow a task or a recovery across processes.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

from pythonjsonlogger.json import JsonFormatter


def setup_json_logging(level: str | None = None, path: Path | None = None, fresh: bool = False) -> None:
    """Log to ``path`` (``fresh``: started anew, as a fresh run's log is; else appended to, as a resumed
    run's is), or to stderr."""
    handler: logging.Handler = (logging.FileHandler(path, mode="w" if fresh else "a") if path
                                else logging.StreamHandler(sys.stderr))
    handler.setFormatter(JsonFormatter("%(asctime)s %(levelname)s %(name)s %(message)s", rename_fields={"levelname": "level"}))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level or os.environ.get("FTPIPELINE_LOG_LEVEL", "INFO"))
    for noisy in ("py4j", "kazoo", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
