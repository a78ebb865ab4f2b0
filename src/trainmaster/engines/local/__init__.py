"""The `local` engine: real training processes on this machine (see `engine.py`)."""
