"""A task's error as the pipeline's author reads it: which stage, which function, what it raised, and where.

A stage's function builds a Spark plan; the code that raises often runs
later, inside Spark's Python worker (a UDF), and reaches the task as
PySpark's ``PythonException``, whose first line is only "An exception was
thrown from the Python worker", with the user's traceback as text below it.
And a chain runs several stages' functions as one Spark job, so the task is
named after the chain's first stage, not after the stage that failed.

So a failed task is described from its traceback's frames, the Python ones
and those in a ``PythonException``'s text alike: the innermost frame in the
pipeline's own code directory is the user's line, and the chain member whose
function's source lines hold one of the user's frames (innermost first) is
the stage. A UDF defined inside the stage's function is found that way; one
defined elsewhere is attributed when the chain has a single function. What
is not the user's code (no frame of theirs) keeps the plain one-line error.
An exception a stage's function raised while building the plan comes
wrapped, naming its stage (``executor.UserCodeError``); its cause holds the
user's frames. The full traceback stays in the worker's log.
"""

from __future__ import annotations

import inspect
import re
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from ftpipeline.obs.errors import one_line
from ftpipeline.spec.model import StageSpec

_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<name>\S+)', re.MULTILINE)
_RAISED = re.compile(r"^(?P<type>[A-Za-z_][\w.]*)(?::\s?(?P<message>.*))?$")


@dataclass(frozen=True)
class Frame:
    file: str
    line: int
    function: str


@dataclass(frozen=True)
class UserError:
    """What the user's code raised: the stage and function it belongs to (when known), the exception, the line."""

    type: str
    message: str
    file: str = ""
    line: int = 0
    in_function: str = ""      # the Python function the line is in (a UDF's own name, say)
    stage: str = ""
    function: str = ""         # the function the stage names in the spec

    def __str__(self) -> str:
        who = f"stage {self.stage!r}" + (f" (function {self.function})" if self.function else "") if self.stage \
            else "the pipeline's code"
        raised = f"{self.type}: {self.message}" if self.message else self.type
        where = f" at {Path(self.file).name}:{self.line}" + (f" in {self.in_function}" if self.in_function else "") \
            if self.file else ""
        return one_line(f"{who} raised {raised}{where}")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def frames_of(exc: BaseException) -> tuple[list[Frame], str, str]:
    """The frames of ``exc``'s traceback, outermost first (a ``PythonException``'s from its text, where the
    Python worker's traceback is), and the type and message of what was raised at the bottom."""
    text = str(exc)
    if "Traceback (most recent call last)" in text:  # Spark's Python worker: its traceback as text
        tail = text[text.rindex("Traceback (most recent call last)"):]
        frames = [Frame(m["file"], int(m["line"]), m["name"]) for m in _FRAME.finditer(tail)]
        raised = next((m for line in reversed(tail.splitlines())
                       if line and not line[0].isspace() and (m := _RAISED.match(line.strip()))), None)
        if raised is not None:
            return frames, raised["type"].rsplit(".", 1)[-1], (raised["message"] or "").strip()
        return frames, type(exc).__name__, one_line(exc)
    frames = [Frame(f.filename, f.lineno or 0, f.name) for f in traceback.extract_tb(exc.__traceback__)]
    return frames, type(exc).__name__, text.strip()


def _span(function: Any) -> tuple[str, int, int] | None:
    """(file, first line, last line) of a Python function's source."""
    try:
        lines, first = inspect.getsourcelines(function)
        return str(Path(inspect.getsourcefile(function) or "").resolve()), first, first + len(lines) - 1
    except (OSError, TypeError):
        return None


def _function_name(member: StageSpec) -> str | None:
    return member.generator.function if member.generator is not None else member.function


def describe(exc: BaseException, members: tuple[StageSpec, ...], module: ModuleType | None,
             code_dir: Path) -> UserError | None:
    """``exc`` of a task running ``members`` (a chain), as a :class:`UserError` when a frame of it is in
    ``code_dir`` (the entry point's directory); None when the user's code is not in it."""
    known = getattr(exc, "stage", ""), getattr(exc, "function", "")  # a wrapper that knows whose call it was
    while exc.__cause__ is not None:  # the wrapper's own frames are ours; the cause's reach the user's
        exc = exc.__cause__
    frames, kind, message = frames_of(exc)
    root = code_dir.resolve()
    mine = [f for f in frames if _under(f.file, root)]
    if not mine:
        return None
    last = mine[-1]
    named = [(m, name) for m in members if (name := _function_name(m)) is not None]
    stage, function = known
    for frame in [] if stage else reversed(mine):
        for member, name in named:
            span = _span(getattr(module, name, None)) if module is not None else None
            if span is not None and span[0] == str(Path(frame.file).resolve()) and span[1] <= frame.line <= span[2]:
                stage, function = member.name, name
                break
        if stage:
            break
    if not stage and len(named) == 1:
        stage, function = named[0][0].name, named[0][1]
    return UserError(kind, message, last.file, last.line, last.function, stage, function)


RUNTIME = Path(__file__).resolve().parents[1]  # the ftpipeline package: never the user's code


def _under(file: str, root: Path) -> bool:
    """Whether ``file`` is the user's: under ``root``, and neither an installed package (a virtualenv kept
    beside the pipeline's code) nor the runtime itself (a pipeline kept in a checkout of it)."""
    if "site-packages" in file or "dist-packages" in file:
        return False
    try:
        path = Path(file).resolve()
        return path.is_relative_to(root) and not path.is_relative_to(RUNTIME)
    except (OSError, ValueError):
        return False
