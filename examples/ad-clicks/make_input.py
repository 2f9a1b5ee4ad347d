"""Writes impressions.jsonl.gz and clicks.jsonl.gz, the demo's input: ads shown over six hours and the clicks
on some of them, as JSON lines, a few malformed.

A click names the impression it came from; most come within a minute or two of it, some after more than the
join's 10 minutes (they join nothing), and impressions and clicks arrive a little out of order.

    python make_input.py            # 20,000 impressions, seed 5
"""

from __future__ import annotations

import gzip
import json
import random
import sys

EPOCH_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
CAMPAIGNS = 6


def main(count: int = 20_000, seed: int = 5) -> None:
    rng = random.Random(seed)
    impressions, clicks = [], []
    for i in range(count):
        ts = EPOCH_MS + i * 1_080 + rng.randrange(-20_000, 20_000)
        campaign = f"c{min(int(rng.expovariate(0.6)), CAMPAIGNS - 1)}"
        impressions.append({"impression_id": f"i{i}", "campaign": campaign, "ts_ms": ts})
        if rng.random() < 0.02 + 0.01 * int(campaign[1:]):  # campaigns differ in click-through rate
            delay = rng.expovariate(1 / 60_000) if rng.random() < 0.9 else rng.randrange(600_000, 1_200_000)
            clicks.append({"click_id": f"k{i}", "impression_id": f"i{i}", "ts_ms": ts + int(delay)})
    clicks.sort(key=lambda c: c["ts_ms"] + rng.randrange(-20_000, 20_000))
    for name, rows in (("impressions", impressions), ("clicks", clicks)):
        with gzip.open(f"{name}.jsonl.gz", "wt") as out:
            for i, row in enumerate(rows):
                if i % 4_999 == 9:  # a broken client
                    out.write('{"impression_id": 17, "ts_ms": "now"}\n')
                    continue
                out.write(json.dumps(row, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:]))
