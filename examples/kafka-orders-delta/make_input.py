"""Writes the demo's input: products.csv (the static catalogue) and orders.jsonl.gz (orders as JSON lines,
a few malformed, a few naming a product the catalogue lacks).

    python make_input.py            # 200 products, 30,000 orders, seed 11
"""

from __future__ import annotations

import csv
import gzip
import json
import random
import sys

CATEGORIES = ["books", "garden", "kitchen", "music", "toys"]
EPOCH_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def main(products: int = 200, orders: int = 30_000, seed: int = 11) -> None:
    rng = random.Random(seed)
    with open("products.csv", "w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(["product_id", "name", "category", "unit_price_cents"])
        for i in range(products):
            writer.writerow([f"p{i:04d}", f"product {i}", rng.choice(CATEGORIES), rng.randint(99, 9_999)])
    with gzip.open("orders.jsonl.gz", "wt") as out:
        for i in range(orders):
            if i % 5_003 == 29:  # a broken client: not JSON, or a field of the wrong type
                out.write('{"order_id": "o1", "customer_id": "c1", "quantity": "two"}\n' if i % 2 else "\x00\x01 garbage\n")
                continue
            product = f"p{rng.randrange(products + 3):04d}"  # now and then one the catalogue does not list
            order = {"order_id": f"o{i:06d}", "customer_id": f"c{rng.randrange(5_000):05d}", "product_id": product,
                     "quantity": rng.choice([1, 1, 1, 2, 2, 3, 5]), "ts_ms": EPOCH_MS + i * 11}
            out.write(json.dumps(order, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:]))
