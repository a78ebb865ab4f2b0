"""Real engines by name, so the daemon picks one from its configuration and never builds one itself.

The simulator is not here: it is built from a workload by `trainmaster simulate`.
"""

from __future__ import annotations

from pathlib import Path

from trainmaster.core.cluster import Cluster
from trainmaster.core.errors import SpecError
from trainmaster.engines.base import Engine

ENGINES = ("local",)  # the Ray engine joins here


def make_engine(name: str, *, cluster: Cluster | None, run_dir: Path, ledger_journal: Path | None = None) -> Engine:
    """The engine `name` over `cluster` (None: what the engine finds, e.g. this machine)."""
    if name == "local":
        from trainmaster.engines.local.engine import LocalEngine  # imported on use: engines stay independent

        return LocalEngine(cluster, run_dir=run_dir, ledger_journal=ledger_journal)
    raise SpecError("--engine", f"unknown engine {name!r}", f"use one of {', '.join(ENGINES)}")
