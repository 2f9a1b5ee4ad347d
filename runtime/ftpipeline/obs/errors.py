"""Errors as people read them: one line that names the cause, never a traceback.

Condition messages, Events, the CLI's last line and task failures carry
:func:`one_line`; the traceback goes to the log of the process where the
error happened (``log.exception``), where a developer looks for it.
"""

from __future__ import annotations

import errno
import re

LIMIT = 400


def one_line(exc: BaseException | str, limit: int = LIMIT) -> str:
    """``Type: first line of the message`` (OSError: ``PermissionError: [Errno 13] Permission denied: '/data/out'``),
    at most ``limit`` characters."""
    if isinstance(exc, str):
        text = exc
    else:
        name = type(exc).__name__
        if isinstance(exc, OSError) and exc.errno is not None and exc.strerror:
            where = f": {exc.filename!r}" if exc.filename is not None else ""
            text = f"{name}: [Errno {exc.errno} {errno.errorcode.get(exc.errno, '?')}] {exc.strerror}{where}"
        else:
            message = str(exc)
            text = f"{name}: {message}" if message else name
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    first = lines[0] if lines else ""
    if first.startswith("Traceback (most recent call last)"):  # a traceback passed as text: keep its last line
        first = lines[-1]
    elif type(exc).__name__ == "PythonException" and len(lines) > 1:
        first = lines[-1]  # raised in Spark's Python worker: its traceback follows a header that says only that
    elif type(exc).__name__ == "Py4JJavaError":
        # "An error occurred while calling o1.x.", ": <the JVM's exception>", its stack, "Caused by: ...":
        # the deepest cause is what went wrong (the exception itself is often a wrapper: "awaitResult")
        causes = [line.removeprefix("Caused by:").strip() for line in lines if line.startswith("Caused by:")]
        thrown = [line[1:].strip() for line in lines[1:] if line.startswith(":")]
        cause = (causes or thrown or [""])[-1]
        if cause:
            first = f"{first} {cause}"
    return first if len(first) <= limit else first[: limit - 1] + "…"


_CREDENTIALS = re.compile(r"(?<=://)([^:/@\s]*):[^@\s]*@")


def redacted(endpoint: str) -> str:
    """An endpoint as it may be shown: ``redis://user:secret@host`` as ``redis://user:***@host`` (the
    same for a ``digest://`` ZooKeeper connect string)."""
    return _CREDENTIALS.sub(r"\1:***@", endpoint)
