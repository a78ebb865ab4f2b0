"""Presets by name: the one explicit registry of scheduling policies."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from trainmaster.core.errors import SpecError

if TYPE_CHECKING:  # the policies (and numpy) load only when a preset is built: the CLI lists names on every call
    from trainmaster.policies.snapshot import Policy

# name -> "module:factory"; a factory takes no arguments and returns a Policy.
PRESETS: dict[str, str] = {
    "fifo": "trainmaster.policies.fifo:make",
    "optimus": "trainmaster.policies.optimus:make",
    "drf": "trainmaster.policies.drf:make",
    "tiresias": "trainmaster.policies.tiresias:make",
    "srtf": "trainmaster.policies.srtf:make",
    "edl": "trainmaster.policies.edl:make",
    "trainmaster": "trainmaster.policies.trainmaster:make",
}

# Presets that read oracle durations (`JobSpec.estimate` set to the true duration): reference lines only.
ORACLE: frozenset[str] = frozenset({"srtf"})


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
