"""The user-sessions example needs no code of its own: its session window is declared in pipeline.yaml."""
