"""The coordinator's inbox against a real Redis: a message whose reply was lost (the server took it, the
connection went before the client read it, the call was sent again) is handed out again, never dropped;
a message handed out is dropped once the next call says it was handled; a coordinator that takes over gets
what its predecessor was handed and may not have handled."""

from __future__ import annotations

import json
from typing import Any

import redis

from ftpipeline.control.store import RunStore


def _ids(messages: list[dict[str, Any]]) -> list[int]:
    return [m["i"] for m in messages]


def test_a_take_whose_reply_was_lost_hands_its_messages_out_on_the_retry(redis_client: redis.Redis,
                                                                          pipeline_name: str) -> None:
    store = RunStore(redis_client, pipeline_name)
    for i in range(3):
        store.send({"t": "x", "i": i})
    assert _ids(store.receive(0.1)) == [0, 1, 2]
    store.send({"t": "x", "i": 3})
    store.send({"t": "x", "i": 4})
    keys = [store.k("inbox"), store.k("inbox:taken"), store.k("inbox:batch")]
    args = [store._batch, "next", 256]
    store._take(keys=keys, args=args)  # the server ran it (0-2 handled, 3 and 4 taken); its reply was lost
    assert _ids([json.loads(m) for m in store._take(keys=keys, args=args)]) == [3, 4]  # the retry


def test_a_blocking_take_whose_reply_was_lost_is_handed_out_by_the_next_call(redis_client: redis.Redis,
                                                                            pipeline_name: str) -> None:
    store = RunStore(redis_client, pipeline_name)
    store.send({"t": "x", "i": 7})
    redis_client.lmove(store.k("inbox"), store.k("inbox:taken"), "LEFT", "RIGHT")  # as BLMOVE did, unread
    assert _ids(store.receive(0.1)) == [7]
    assert store.receive(0.1) == []  # handled: gone
    assert redis_client.llen(store.k("inbox:taken")) == 0


def test_a_coordinator_taking_over_is_handed_what_its_predecessor_may_not_have_handled(
        redis_client: redis.Redis, pipeline_name: str) -> None:
    first = RunStore(redis_client, pipeline_name)
    for i in range(2):
        first.send({"t": "x", "i": i})
    assert _ids(first.receive(0.1)) == [0, 1]  # then it died, perhaps before handling them
    first.send({"t": "x", "i": 2})
    second = RunStore(redis_client, pipeline_name)
    assert _ids(second.receive(0.1)) == [0, 1, 2]
    assert second.receive(0.1) == []
    first.send({"t": "x", "i": 3})
    assert _ids(second.receive(0.5)) == [3]
