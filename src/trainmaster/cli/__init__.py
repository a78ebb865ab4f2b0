"""Faces: parse, show, nothing else."""
