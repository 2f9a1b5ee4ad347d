"""Unit tests: pure logic, no servers (no Redis, no JVM)."""
