"""Time spent on steps: the union of their spans, not the sum of their latencies.

Steps overlap: a step goes out while its predecessor's commit is being
written to the command log, and pipelined mode keeps several in flight. A
step's latency runs from its trigger to its release; summing latencies would
count the overlap twice and understate throughput, so rates are rows over
the length of the union of the steps' spans (what the benchmarks measure
for Spark Structured Streaming's batches as well).
"""

from __future__ import annotations

from collections.abc import Sequence


def step_spans(commit_at: Sequence[float], step_seconds: Sequence[float]) -> list[tuple[float, float]]:
    """(start, end) of each step, from when it was released and how long it took."""
    return [(end - took, end) for end, took in zip(commit_at, step_seconds, strict=True)]


def busy_seconds(spans: Sequence[tuple[float, float]]) -> float:
    """Length of the union of the intervals."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(spans):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total
