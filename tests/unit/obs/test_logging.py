"""A log line is one JSON object; py4j's retried command (logged with a traceback at INFO) stays one line."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import py4j.java_gateway

from ftpipeline.obs.logging import setup_json_logging


def test_py4j_retry_notice_is_one_line_naming_the_error_without_a_traceback(tmp_path: Path) -> None:
    log = tmp_path / "executor.log"
    root = logging.getLogger()
    kept, level = list(root.handlers), root.level  # pytest's own (caplog's) go back afterwards
    setup_json_logging(path=log, fresh=True)
    try:
        try:
            raise ConnectionError("Answer from Java side is empty")
        except ConnectionError:  # as py4j does: the root logger, from its own module
            record = logging.getLogger().makeRecord("root", logging.INFO, py4j.java_gateway.__file__, 1056,
                                                    "Exception while sending command.", (), sys.exc_info())
            logging.getLogger().handle(record)
            logging.getLogger("ftpipeline.test").exception("task failed")  # ours keeps its traceback
    finally:
        for handler in list(root.handlers):
            handler.close()
            root.removeHandler(handler)
        for handler in kept:
            root.addHandler(handler)
        root.setLevel(level)
    first, second = (json.loads(line) for line in log.read_text().splitlines())
    assert first["message"] == "Exception while sending command."
    assert first["error"] == "ConnectionError: Answer from Java side is empty" and "exc_info" not in first
    assert "Traceback" in second["exc_info"]
