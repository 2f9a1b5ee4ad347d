"""Unbounded streams for long runs (the entry point of the 500-step tests): ad impressions and clicks keyed by
ad, and card payments, each with an event time that moves a second a step, and the fraud rule of
``fraud_rule.py`` for the payments."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
from fraud_rule import FraudRule

EPOCH_MS = 1_767_225_600_000
__all__ = ["FraudRule", "clicks", "impressions", "payments"]


def _times(ctx: Any, spread_ms: int) -> np.ndarray:
    seq = np.arange(ctx.offset, ctx.offset + ctx.rows, dtype=np.int64)
    return EPOCH_MS + seq * 5 + ctx.rng.integers(-spread_ms, spread_ms, ctx.rows)


def impressions(ctx: Any) -> pa.Table:
    return pa.table({"ad": np.char.add("ad", ctx.rng.integers(0, 200, ctx.rows).astype(str)),
                     "campaign": np.char.add("c", ctx.rng.integers(0, 8, ctx.rows).astype(str)),
                     "ts": _times(ctx, 2_000)})


def clicks(ctx: Any) -> pa.Table:
    return pa.table({"ad": np.char.add("ad", ctx.rng.integers(0, 200, ctx.rows).astype(str)),
                     "cost": ctx.rng.integers(1, 50, ctx.rows), "ts": _times(ctx, 2_000)})


def payments(ctx: Any) -> pa.Table:
    return pa.table({"card": np.char.add("card", ctx.rng.integers(0, 300, ctx.rows).astype(str)),
                     "merchant": np.char.add("m", ctx.rng.integers(0, 6, ctx.rows).astype(str)),
                     "declined": ctx.rng.random(ctx.rows) < 0.3, "ts": _times(ctx, 1_000)})
