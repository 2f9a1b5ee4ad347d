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


def _py4j_retry_in_one_line(record: logging.LogRecord) -> bool:
    """py4j logs a retried command to the root logger at INFO with its traceback (a JVM stopped at a run's end
    while Python still talks to it): keep the line, as one line (``error``), without the traceback."""
    if record.exc_info and record.levelno < logging.WARNING and "py4j" in record.pathname:
        exc = record.exc_info[1]
        record.error = f"{type(exc).__name__}: {exc}" if exc is not None else ""
        record.exc_info = None
        record.exc_text = None
    return True


def setup_json_logging(level: str | None = None, path: Path | None = None, fresh: bool = False) -> None:
    """Log to ``path`` (``fresh``: started anew, as a fresh run's log is; else appended to, as a resumed
    run's is), or to stderr."""
    handler: logging.Handler = (logging.FileHandler(path, mode="w" if fresh else "a") if path
                                else logging.StreamHandler(sys.stderr))
    handler.setFormatter(JsonFormatter("%(asctime)s %(levelname)s %(name)s %(message)s", rename_fields={"levelname": "level"}))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    handler.addFilter(_py4j_retry_in_one_line)
    root.addHandler(handler)
    root.setLevel(level or os.environ.get("FTPIPELINE_LOG_LEVEL", "INFO"))
    for noisy in ("py4j", "kazoo", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
