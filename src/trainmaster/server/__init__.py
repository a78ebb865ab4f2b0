"""The daemon: scheduler on the real clock, REST API, dashboard."""
