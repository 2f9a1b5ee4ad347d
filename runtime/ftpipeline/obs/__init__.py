"""Observability: structured logs and Prometheus metrics."""
