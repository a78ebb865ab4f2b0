"""Traces and profiles turned into jobs, and synthetic generators."""
