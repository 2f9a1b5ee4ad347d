"""Real servers started privately for local runs (embedded defaults)."""
