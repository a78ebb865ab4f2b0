"""trainmaster: a scheduler for distributed deep-learning training jobs."""

__version__ = "0.1.0"
