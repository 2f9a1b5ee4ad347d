"""Writes the example's input: four days of web-shop orders as JSON Lines, one file a day.

Deterministic (a fixed seed), so the committed files can be made again. A
few records are broken on purpose — a quantity that is not a number, a line
that is not JSON — to show where such records go: the dead-letter output,
named by file and line, while the run goes on.

    python examples/orders-files/make_input.py
"""

from __future__ import annotations

import json
import random
from pathlib import Path

COUNTRIES = ["DE", "FR", "NL", "PL", "ES", "IT", "SE", "AT"]
DAYS = ["2026-11-01", "2026-11-02", "2026-11-03", "2026-11-04"]
ORDERS_PER_DAY = 1000


def main() -> None:
    rng = random.Random(40)
    out = Path(__file__).resolve().parent / "orders"
    out.mkdir(exist_ok=True)
    for day in DAYS:
        lines = []
        for i in range(ORDERS_PER_DAY):
            order = {"order_id": f"{day}-{i:05d}", "country": rng.choice(COUNTRIES),
                     "quantity": rng.randint(1, 5), "unit_cents": rng.randint(99, 9_999),
                     "status": rng.choices(["paid", "cancelled"], [0.93, 0.07])[0]}
            lines.append(json.dumps(order))
        wrong = rng.randrange(len(lines))
        lines[wrong] = lines[wrong].replace('"quantity": ', '"quantity": "two", "was": ')
        lines[rng.randrange(len(lines))] = "{not json"
        (out / f"{day}.jsonl").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
