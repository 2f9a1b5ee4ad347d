"""Exactly-once output (FlameStream's barrier); see ``bundles.py``."""

from ftpipeline.barrier.bundles import Bundle, ParquetBundleSink

__all__ = ["Bundle", "ParquetBundleSink"]
