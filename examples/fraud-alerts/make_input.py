"""Writes payments.jsonl.gz, the demo's input: card payments over a day as JSON lines, a few malformed.

Most cards pay now and then and are rarely declined; a few go through a burst of declined payments (a stolen
card being tested) and then fall silent, or pay again before 10 minutes have passed.

    python make_input.py            # 30,000 payments, seed 3
"""

from __future__ import annotations

import gzip
import json
import random
import sys

CARDS = 400
EPOCH_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def main(count: int = 30_000, seed: int = 3) -> None:
    rng = random.Random(seed)
    payments = []
    ts = EPOCH_MS
    while len(payments) < count:
        ts += rng.randrange(500, 5_000)
        card = f"card{rng.randrange(CARDS):04d}"
        if rng.random() < 0.01:  # a burst: 3 to 6 declines a minute or so apart
            for _ in range(rng.randrange(3, 7)):
                payments.append({"card": card, "merchant": f"m{rng.randrange(40)}", "declined": True, "ts_ms": ts})
                ts += rng.randrange(20_000, 90_000)
            continue
        payments.append({"card": card, "merchant": f"m{rng.randrange(40)}", "declined": rng.random() < 0.03,
                         "ts_ms": ts + rng.randrange(-30_000, 30_000)})  # a little out of order
    with gzip.open("payments.jsonl.gz", "wt") as out:
        for i, p in enumerate(payments[:count]):
            if i % 5_003 == 11:  # a broken client
                out.write('{"card": "card0001", "declined": "maybe"}\n')
                continue
            out.write(json.dumps({"payment_id": f"p{i}", **p}, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:]))
