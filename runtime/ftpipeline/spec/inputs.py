"""Pass 3 for inputs: what a run reads at its start must be there to read.

A file source whose directory is missing or unreadable used to start the
run anyway: every read failed in a worker's sidecar, a warning in its log,
and the run waited for ever on input that could not come. The directory is
checked where it is read, before anything starts: by ``ftpipeline run`` and
``validate`` on this machine, and by each worker at start-up on Kubernetes,
where only the pod sees the volume (a worker that finds it missing cannot
run: ``worker/exits.py``). A ``follow`` source may start before its
directory exists: it waits for files by design.
"""

from __future__ import annotations

import os

from ftpipeline.spec.model import PipelineSpec
from ftpipeline.spec.problems import Problem


def input_problems(spec: PipelineSpec) -> list[Problem]:
    """Each input of ``spec`` that cannot be read now, naming its field and path."""
    problems = []
    for i, stage in enumerate(spec.stages):
        source = stage.file
        if source is None or source.follow:
            continue
        field, path = f"spec.stages[{i}].source.file.path", source.path
        if not path.exists():
            problems.append(Problem(field, f"{path} does not exist"))
        elif not path.is_dir():
            problems.append(Problem(field, f"{path} is not a directory"))
        elif not os.access(path, os.R_OK | os.X_OK):
            problems.append(Problem(field, f"{path} cannot be read (permission denied for uid {os.getuid()})"))
    return problems
