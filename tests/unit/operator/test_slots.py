"""Coordinator threads: a waiting pipeline holds none, and no more than the pool's size run at once."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from ftpipeline_operator.runner import Rest
from ftpipeline_operator.slots import CoordinatorSlots


class Stopped:
    """Kopf's stop flag of an async daemon."""

    def __init__(self) -> None:
        self.event = asyncio.Event()

    def __bool__(self) -> bool:
        return self.event.is_set()

    async def wait(self, timeout: float | None = None) -> Any:
        await self.event.wait()
        return self


class Runner:
    """Attempts that take ``seconds`` on their thread and end with the next of ``rests``."""

    def __init__(self, rests: list[Rest], seconds: float = 0.05) -> None:
        self.rests, self.seconds = rests, seconds
        self.attempts = 0
        self.slot_waits = 0
        self._changed = threading.Event()
        self.on_change: Any = lambda: None
        self.threads: set[str] = set()

    @property
    def changed(self) -> bool:
        return self._changed.is_set()

    def change(self) -> None:  # as update_body does, from a handler's thread
        self._changed.set()
        self.on_change()

    def attempt(self, stopped: Any) -> Rest:
        self._changed.clear()
        self.attempts += 1
        self.threads.add(threading.current_thread().name)
        ACTIVE.append(1)
        try:
            peak.append(len(ACTIVE))
            time.sleep(self.seconds)
        finally:
            ACTIVE.pop()
        return self.rests.pop(0) if self.rests else Rest.GONE

    def waiting_for_slot(self, running: int) -> None:
        self.slot_waits += 1

    ended = False  # Succeeded or Failed with this spec

    def stay_ended(self) -> Rest:
        return Rest.CHANGE


ACTIVE: list[int] = []
peak: list[int] = []


def test_no_more_attempts_run_at_once_than_the_pool_has_threads_and_the_rest_wait_saying_so() -> None:
    peak.clear()

    async def main() -> list[Runner]:
        slots = CoordinatorSlots(2)
        runners = [Runner([Rest.CHANGE], seconds=0.1) for _ in range(6)]
        stopped = Stopped()
        daemons = [asyncio.create_task(slots.serve(r, stopped)) for r in runners]
        await asyncio.sleep(1.0)
        assert slots.running == 0  # every one rests, waiting for a change, on no thread
        stopped.event.set()
        await asyncio.wait_for(asyncio.gather(*daemons), 5)
        return runners

    runners = asyncio.run(main())
    assert max(peak) == 2
    assert all(r.attempts == 1 for r in runners)
    assert sum(r.slot_waits for r in runners) >= 4  # the pipelines beyond the second were told they wait
    assert {t for r in runners for t in r.threads} <= {f"coordinator_{i}" for i in range(2)}


def test_a_resting_pipeline_runs_again_when_its_spec_changes_and_a_backoff_ends_by_itself() -> None:
    async def main() -> tuple[Runner, Runner]:
        slots = CoordinatorSlots(1)
        stopped = Stopped()
        resting = Runner([Rest.CHANGE, Rest.GONE])
        backing_off = Runner([Rest(retry_in=0.2), Rest.GONE])
        first = asyncio.create_task(slots.serve(resting, stopped))
        second = asyncio.create_task(slots.serve(backing_off, stopped))
        await asyncio.sleep(0.5)
        assert resting.attempts == 1 and not first.done()
        assert second.done() and backing_off.attempts == 2  # tried again after its backoff; GONE ended it
        await asyncio.to_thread(resting.change)
        await asyncio.wait_for(first, 5)  # its second attempt said GONE: the daemon ended
        return resting, backing_off

    resting, _ = asyncio.run(main())
    assert resting.attempts == 2


def test_a_stop_ends_a_resting_daemon_at_once() -> None:
    async def main() -> float:
        slots = CoordinatorSlots(1)
        stopped = Stopped()
        runner = Runner([Rest(retry_in=3600)])
        daemon = asyncio.create_task(slots.serve(runner, stopped))
        await asyncio.sleep(0.3)
        t0 = time.monotonic()
        stopped.event.set()
        await asyncio.wait_for(daemon, 5)
        return time.monotonic() - t0

    assert asyncio.run(main()) < 1.0


def test_an_attempt_sees_the_context_of_the_daemon_that_runs_it() -> None:
    """Kopf keeps what ``kopf.event`` needs in context variables: an attempt on a pool thread must see them."""
    import contextvars

    var: contextvars.ContextVar[str] = contextvars.ContextVar("kopf-settings", default="none")
    seen: list[str] = []

    class Seeing(Runner):
        def attempt(self, stopped: Any) -> Rest:
            seen.append(var.get())
            return Rest.GONE

    async def main() -> None:
        var.set("the daemon's")
        await asyncio.wait_for(CoordinatorSlots(1).serve(Seeing([]), Stopped()), 5)  # type: ignore[arg-type]

    asyncio.run(main())
    assert seen == ["the daemon's"]


def test_an_ended_pipeline_takes_no_slot_and_is_not_marked_pending_until_its_spec_changes() -> None:
    """Every thread taken: a pipeline that ended with its spec waits for a change without a slot, so its status
    is never overwritten with Pending (which a later operator would read as not ended)."""
    class Ended(Runner):
        ended = True

    async def main() -> tuple[Runner, Runner]:
        slots = CoordinatorSlots(1)
        busy, done = Runner([Rest.GONE], seconds=0.5), Ended([])
        stop = Stopped()
        tasks = [asyncio.create_task(slots.serve(busy, stop)),  # type: ignore[arg-type]
                 asyncio.create_task(slots.serve(done, stop))]  # type: ignore[arg-type]
        await asyncio.sleep(0.3)
        assert done.attempts == 0 and done.slot_waits == 0
        done.ended = False  # its spec changed
        done.change()
        await asyncio.wait_for(asyncio.gather(*tasks), 5)
        return busy, done

    busy, done = asyncio.run(main())
    assert busy.attempts == 1 and done.attempts == 1
