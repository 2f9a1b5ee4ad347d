"""Writes the example's input: a working day of user events as JSON Lines, in the order they arrived.

Each of 80 users comes back a few times a day; a visit is a burst of events
10 s to 4 min apart, and visits are usually more than half an hour apart
(sometimes less: those two visits are one session). Events reach the log
0-20 s after they happen, so the file is a little out of order. One event in
two hundred is a straggler (a phone that was offline) that arrives 45 to 120
minutes late: its own session would have closed already, so it goes to the
late-data output. Deterministic (a fixed seed), so the committed file can be
made again.

    python examples/user-sessions/make_input.py
"""

from __future__ import annotations

import json
import random
from pathlib import Path

PAGES = ["/", "/search", "/cart", "/checkout", "/help", "/product/1", "/product/2", "/product/3"]
START_MS = 1_793_523_600_000  # 2026-11-01 09:00:00 UTC
USERS = 80
HOURS = 8


def main() -> None:
    rng = random.Random(41)
    events = []
    for u in range(USERS):
        at = START_MS + rng.randrange(3_600_000)
        while at < START_MS + HOURS * 3_600_000:
            for _ in range(rng.randrange(2, 16)):
                delay = rng.randrange(2_700_000, 7_200_000) if rng.random() < 0.005 else rng.randrange(20_000)
                events.append((at + delay, {"user": f"u{u:02d}", "page": rng.choice(PAGES), "ts": at}))
                at += rng.randrange(10_000, 240_000)
            at += rng.randrange(20 * 60_000, 150 * 60_000)
    events.sort(key=lambda e: (e[0], e[1]["ts"], e[1]["user"]))
    out = Path(__file__).resolve().parent / "events"
    out.mkdir(exist_ok=True)
    (out / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for _, e in events))


if __name__ == "__main__":
    main()
