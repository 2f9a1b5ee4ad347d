"""Run records shared by the coordinator and the workers (Redis); see ``store.py``."""
