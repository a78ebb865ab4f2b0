"""Presets by name: the one explicit registry of scheduling policies."""

from __future__ import annotations

import importlib

from trainmaster.core.errors import SpecError
from trainmaster.policies.snapshot import Policy

# name -> "module:factory"; a factory takes no arguments and returns a Policy.
PRESETS: dict[str, str] = {
    "fifo": "trainmaster.policies.fifo:make",
}


def available() -> list[str]:
    return sorted(PRESETS)


def make_policy(name: str) -> Policy:
    """Build the preset `name`, or raise a SpecError listing the known ones."""
    target = PRESETS.get(name.strip())
    if target is None:
        raise SpecError("policy", f"unknown policy {name!r}", f"use one of {', '.join(available())}")
    module, factory = target.split(":")
    policy: Policy = getattr(importlib.import_module(module), factory)()
    return policy
