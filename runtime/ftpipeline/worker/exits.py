"""A worker that cannot run: the exit that tells its backend not to replace it.

A worker whose process exits is lost, and a lost worker is recovered and
replaced. That is right for a crash, an OOM kill or a deleted pod, and wrong
for a worker that stops at start-up for a reason its replacement would meet
too: the entry point does not import, a stage names a function the module
lacks. Replacing it loops (each replacement exits the same way) until a
restart budget, counted in time, runs out, if it ever does. Such a worker
exits with ``CANNOT_RUN`` (78, EX_CONFIG of sysexits.h) after writing its
one-line reason where its backend reads it:

- on Kubernetes, the container's termination log: the kubelet keeps it as
  the termination message, which the operator's diagnosis quotes
  (``ftpipeline_operator/failures.py``);
- as a local process, ``REASON_FILE`` in the worker's directory
  (``cluster/local.py``).

The backend answers ``ClusterBackend.cannot_run`` with that reason, and the
coordinator fails the run at once (``coordinator.errors.CannotRun``) instead
of recovering the worker: the operator marks the pipeline Rejected, the CLI
prints the reason.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import NoReturn

log = logging.getLogger("ftpipeline.worker")

CANNOT_RUN = 78
REASON_FILE = "cannot-run"
TERMINATION_LOG = Path("/dev/termination-log")  # Kubernetes' default terminationMessagePath
MAX_REASON = 4000  # the kubelet keeps at most 4096 bytes of a termination message


def cannot_run(message: str, work_dir: Path) -> NoReturn:
    """Exit with ``CANNOT_RUN``, the reason written to the termination log and the worker's directory."""
    log.error("cannot run", extra={"error": message})
    for path in (TERMINATION_LOG, work_dir / REASON_FILE):
        try:
            path.write_text(message[:MAX_REASON])
        except OSError:
            pass  # not a container (no termination log): the other place, and the log line, say it
    sys.exit(CANNOT_RUN)


def reason(work_dir: Path) -> str:
    """What a worker that exited with ``CANNOT_RUN`` wrote in its directory."""
    try:
        return (work_dir / REASON_FILE).read_text().strip() or "no reason written"
    except OSError:
        return "no reason written"
