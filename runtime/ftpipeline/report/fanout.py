"""One coordinator, several observers: the terminal's and the report's timeline.

Why: the coordinator takes one ``Observer``. ``ftpipeline run`` already
gives it the progress bar; the run report needs the same events. ``Fanout``
hands every ``on_*`` callback to each observer in turn, whatever its name
and arguments, so a callback or a keyword argument added to ``Observer``
later reaches them all without a change here.

The first observer is the one the run relies on: what it raises reaches the
coordinator, as before. The others only watch: a fault in one of them is
logged once and never stops the run.
"""

from __future__ import annotations

import logging
from typing import Any

from ftpipeline.coordinator.coordinator import Observer

__all__ = ["Fanout"]

log = logging.getLogger("ftpipeline.report")


class Fanout(Observer):
    """Forwards each callback to ``primary`` (its errors propagate), then to each of ``watchers``."""

    def __init__(self, primary: Observer, *watchers: Observer) -> None:
        self.primary = primary
        self.watchers = watchers
        self._failed: set[tuple[int, str]] = set()

    def __getattribute__(self, name: str) -> Any:
        if not name.startswith("on_") or not hasattr(Observer, name):
            return object.__getattribute__(self, name)
        primary: Observer = object.__getattribute__(self, "primary")
        watchers: tuple[Observer, ...] = object.__getattribute__(self, "watchers")
        failed: set[tuple[int, str]] = object.__getattribute__(self, "_failed")

        def forward(*args: Any, **kwargs: Any) -> None:
            getattr(primary, name)(*args, **kwargs)
            for i, watcher in enumerate(watchers):
                try:
                    getattr(watcher, name)(*args, **kwargs)
                except Exception:
                    if (i, name) not in failed:
                        failed.add((i, name))
                        log.exception("an observer failed; the run goes on without it for this event",
                                      extra={"observer": type(watcher).__name__, "callback": name})

        return forward
