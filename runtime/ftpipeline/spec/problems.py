"""What is wrong with a pipeline, named by field: the error every validation pass raises.

Its own module so that each pass (``load.py``: the document and the entry
point; ``inputs.py``: what the run reads) reports in the same form.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class SpecError(ValueError):
    """An FTPipeline document that cannot run; ``problems`` name each field."""

    def __init__(self, source: str, problems: Sequence[Problem]) -> None:
        self.source = source
        self.problems = tuple(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"invalid pipeline {source}:\n{lines}")
