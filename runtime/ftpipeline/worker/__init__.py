"""A worker: a Spark process (``executor.py``) beside a runtime sidecar (``sidecar.py``)."""
