"""Kafka clients as the runtime uses them: one configuration, errors in one line (``client.py``)."""
