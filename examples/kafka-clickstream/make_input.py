"""Writes clicks.jsonl.gz, the demo's input: a web shop's events as JSON lines, a few of them malformed.

    python make_input.py            # 40,000 events, seed 7
"""

from __future__ import annotations

import gzip
import json
import random
import sys

USERS = 2_000
KINDS = ["view", "click", "add_to_cart", "purchase"]
WEIGHTS = [0.62, 0.28, 0.07, 0.03]
EPOCH_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def main(count: int = 40_000, seed: int = 7) -> None:
    rng = random.Random(seed)
    with gzip.open("clicks.jsonl.gz", "wt") as out:
        for i in range(count):
            if i % 4_001 == 17:  # a broken client: not JSON, or a field of the wrong type
                out.write('{"user_id": "u000001", "event_type": "view", "amount_cents": "free"}\n' if i % 2 else
                          "<html>502 Bad Gateway</html>\n")
                continue
            kind = rng.choices(KINDS, WEIGHTS)[0]
            event = {"event_id": f"e{i}", "user_id": f"u{min(int(rng.expovariate(1 / 300)), USERS - 1):06d}",
                     "event_type": kind, "amount_cents": rng.randint(199, 25_000) if kind == "purchase" else 0,
                     "is_bot": rng.random() < 0.02, "ts_ms": EPOCH_MS + i * 7}
            out.write(json.dumps(event, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:]))
