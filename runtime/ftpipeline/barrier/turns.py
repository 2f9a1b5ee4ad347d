"""One release of a sink channel at a time in a worker, and what becomes of one that never ends.

Why: a release the coordinator gave up on (its call's deadline passed) can still be running in the
worker, in its producer's calls. A second release of the channel must not use that producer at once, so
it waits for its turn. But a Kafka client call can also never return: librdkafka's
``send_offsets_to_transaction`` ignores its timeout and waits for ever once the group coordinator it
had cached went away (a broker killed and restarted: confluentinc/librdkafka#5456, #5511). Waiting for
that turn would refuse every later release of the channel in this worker. So a turn held for longer than
``stuck_s`` is abandoned: the next release takes a new turn, and the caller gives the channel new
clients, whose producer fences the stuck one (the same transactional id, as a release in another worker
would). The stuck thread is left where it is; whatever it does when it wakes up is refused by Kafka.

States of one channel's turn::

    free --take--> held (since t)
    held --its holder gives it back--> free
    held --take, given back within wait_s--> held by the taker
    held --take, still held after wait_s--> held (the take fails: Busy)
    held --take, held for stuck_s or more--> held by the taker (the old turn void: giving it back
                                                                 changes nothing)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass


class Busy(RuntimeError):
    """Another release of the channel holds its turn, and held it for less than ``stuck_s``."""


@dataclass(eq=False)
class Turn:
    channel: int
    since: float
    took_over: Turn | None = None  # the stuck turn this one replaced: its channel needs new clients
    void: bool = False             # replaced while held: its holder must leave the channel's clients alone


class Turns:
    def __init__(self, wait_s: float, stuck_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.wait_s, self.stuck_s, self.clock = wait_s, stuck_s, clock
        self._held: dict[int, Turn] = {}
        self._changed = threading.Condition()

    def take(self, channel: int) -> Turn:
        """The channel's turn: at once when free, after waiting up to ``wait_s`` for its holder, or from a
        holder that has had it for ``stuck_s``."""
        deadline = self.clock() + self.wait_s
        with self._changed:
            while True:
                held, now = self._held.get(channel), self.clock()
                if held is None or now - held.since >= self.stuck_s:
                    if held is not None:
                        held.void = True
                    turn = self._held[channel] = Turn(channel, now, took_over=held)
                    return turn
                if now >= deadline:
                    raise Busy(f"channel {channel}: a release has held it for {now - held.since:.0f}s")
                self._changed.wait(min(deadline, held.since + self.stuck_s) - now)

    def give_back(self, turn: Turn) -> None:
        with self._changed:
            if self._held.get(turn.channel) is turn:
                del self._held[turn.channel]
                self._changed.notify_all()
