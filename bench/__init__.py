"""Reproducible benchmarks: `python -m bench.<name>` from the project root."""
