"""Where workers run: local processes (``local.py``) or, later, Kubernetes pods."""
