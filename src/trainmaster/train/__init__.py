"""The library user code imports inside a job: standard library and torch only."""
