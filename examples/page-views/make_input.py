"""Writes the example's input: half an hour of page views as JSON Lines, in the order they arrived.

Each view happens at ``ts`` (milliseconds since the epoch) and reaches the
log 0-8 seconds later, so the file is a little out of order, as any log fed
by many browsers is. One view in a hundred is a straggler (a phone that was
offline) that arrives one to three minutes late: behind the watermark, its
minute already counted. Those are the late-data output. Deterministic (a
fixed seed), so the committed file can be made again.

    python examples/page-views/make_input.py
"""

from __future__ import annotations

import json
import random
from pathlib import Path

PAGES = ["/", "/search", "/cart", "/checkout", "/help", "/product/1", "/product/2", "/product/3"]
START_MS = 1_793_523_600_000  # 2026-11-01 09:00:00 UTC
VIEWS = 6000
MINUTES = 30


def main() -> None:
    rng = random.Random(41)
    views = []
    for i in range(VIEWS):
        ts = START_MS + rng.randrange(MINUTES * 60_000)
        delay = rng.randrange(60_000, 180_000) if rng.random() < 0.01 else rng.randrange(8_000)
        views.append((ts + delay, {"user": f"u{rng.randrange(500):03d}", "page": rng.choice(PAGES), "ts": ts}))
    views.sort(key=lambda v: (v[0], v[1]["ts"]))
    out = Path(__file__).resolve().parent / "clicks"
    out.mkdir(exist_ok=True)
    (out / "views.jsonl").write_text("".join(json.dumps(v) + "\n" for _, v in views))


if __name__ == "__main__":
    main()
