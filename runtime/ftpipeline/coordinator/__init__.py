"""The coordinator: lockstep steps, triggers, recovery (``coordinator.py``)."""
