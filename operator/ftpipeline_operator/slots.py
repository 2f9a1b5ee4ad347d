"""Where coordinators run: a bounded pool of threads of the operator's own, none held while a pipeline waits.

A coordinator is a blocking loop (it waits on Redis and ZooKeeper), so a
running pipeline needs a thread. Kopf's sync daemons would hold one of its
handler executor's threads for each pipeline's whole life, finished ones
too, and once they were all taken every handler (pod events, finalizers,
reconciles) of every pipeline stalled. Here each pipeline's daemon is a
coroutine on Kopf's loop; it takes a thread of this pool
(``maxRunningPipelines`` of them, apart from Kopf's) only for an attempt,
and gives it back while it waits: for a spec change (Succeeded, Failed,
Suspended), or out a retry's backoff. One pipeline's daemon:

    WAITING  --ended with this spec (Succeeded, Failed)--> RESTING at once, no thread taken, no Pending
    WAITING  --a thread free--> ATTEMPT (runner.attempt on a pool thread)
    WAITING  --every thread taken--> the same, with status Pending saying so
    ATTEMPT  --Rest.CHANGE (succeeded, failed, suspended)--> RESTING --spec changed--> WAITING
    ATTEMPT  --Rest(retry_in)--> BACKOFF --the time passed, or the spec changed--> WAITING
    ATTEMPT  --Rest.NONE (stopped by a spec change: suspend, restart)--> WAITING
    ATTEMPT  --Rest.GONE (another coordinator claimed the pipeline)--> the daemon ends
    any      --Kopf stops the daemon (deletion, operator exit or pause)--> the attempt is told to stop;
              the daemon ends when it has

Kopf's stop flag of an async daemon cannot be waited on from a thread, so
the attempt gets a :class:`ThreadStop` that the coroutine sets when Kopf's
flag is. The attempt runs in a copy of the daemon's context: Kopf keeps what
``kopf.event`` needs in context variables, and a plain executor thread has
none of them (Events were silently not posted).
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from ftpipeline_operator.runner import PipelineRunner, Rest

class KopfStopped(Protocol):
    """An async daemon's stop flag (``kopf.DaemonStopped``)."""

    def __bool__(self) -> bool: ...
    def wait(self, timeout: float | None = None) -> Any: ...


class ThreadStop:
    """A stop flag an attempt's thread can test and wait on (``runner.Stopped``)."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def set(self) -> None:
        self._event.set()

    def __bool__(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        return self._event.wait(timeout)


class CoordinatorSlots:
    def __init__(self, size: int) -> None:
        self.size = size
        self.executor = ThreadPoolExecutor(size, thread_name_prefix="coordinator")
        self.running = 0
        self._free: asyncio.Semaphore | None = None  # made on Kopf's loop, at the first use

    def _slots(self) -> asyncio.Semaphore:
        if self._free is None:
            self._free = asyncio.Semaphore(self.size)
        return self._free

    async def serve(self, runner: PipelineRunner, stopped: KopfStopped) -> None:
        """The pipeline's daemon: attempts on a pool thread, waits on none, until Kopf stops it."""
        loop = asyncio.get_running_loop()
        wake = asyncio.Event()
        stop = ThreadStop()

        async def relay() -> None:
            await stopped.wait()
            stop.set()
            wake.set()

        def on_change() -> None:  # called on a handler's thread
            loop.call_soon_threadsafe(wake.set)

        runner.on_change = on_change
        relaying = asyncio.create_task(relay())
        free = self._slots()
        try:
            while not stop:
                if runner.ended:  # Succeeded or Failed with this spec: no slot, no Pending, until it changes
                    runner.stay_ended()
                    await self._rest(runner, Rest.CHANGE, wake, stop)
                    continue
                if free.locked():
                    await asyncio.to_thread(runner.waiting_for_slot, self.size)
                async with free:
                    if stop:
                        break
                    self.running += 1
                    try:
                        context = contextvars.copy_context()  # Kopf's: kopf.event needs it on our thread
                        rest = await loop.run_in_executor(self.executor, context.run, runner.attempt, stop)
                    finally:
                        self.running -= 1
                if rest.gone:
                    return
                if rest.for_change or rest.retry_in is not None:
                    await self._rest(runner, rest, wake, stop)
        finally:
            stop.set()  # cancelled by Kopf: the attempt still running on its thread stops too
            runner.on_change = lambda: None
            relaying.cancel()

    @staticmethod
    async def _rest(runner: PipelineRunner, rest: Rest, wake: asyncio.Event, stop: ThreadStop) -> None:
        """Until the spec changes or the daemon is stopped (and at most ``rest.retry_in``)."""
        while not stop and not runner.changed:
            wake.clear()
            if runner.changed or stop:  # set between the test above and the clear
                return
            try:
                await asyncio.wait_for(wake.wait(), rest.retry_in)
            except asyncio.TimeoutError:
                return
