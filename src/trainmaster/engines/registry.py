"""Real engines by name, so the daemon picks one from its configuration and never builds one itself.

The simulator is not here: it is built from a workload by `trainmaster simulate`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from trainmaster.core.errors import SpecError

if TYPE_CHECKING:  # the server's parser reads ENGINES on every CLI call: the engines' types load on use
    from trainmaster.core.cluster import Cluster
    from trainmaster.core.market import Market
    from trainmaster.engines.base import Engine

ENGINES = ("local", "ray")
RAY_ADDRESS = "RAY_ADDRESS"  # the Ray cluster to join (`trainmaster server --ray-address` sets it)


def make_engine(name: str, *, cluster: Cluster | None, run_dir: Path, ledger_journal: Path | None = None,
                market: Market | None = None, replace_delay: float | None = None) -> Engine:
    """The engine `name` over `cluster` (None: what the engine finds, e.g. this machine); `market` revokes its
    transient nodes (a revoked node comes back after `replace_delay` seconds; None: never)."""
    if name == "local":
        from trainmaster.engines.local.engine import LocalEngine  # imported on use: engines stay independent

        return LocalEngine(cluster, run_dir=run_dir, ledger_journal=ledger_journal, market=market,
                           replace_delay=replace_delay)
    if market is not None:
        raise SpecError("--market", f"the {name} engine takes its nodes from Ray, which revokes them itself",
                        "drop --market, or use --engine local")
    if name == "ray":
        if cluster is not None:
            raise SpecError("--cluster", "the ray engine reads its nodes from the Ray cluster",
                            "drop --cluster; label Ray nodes (trainmaster.io/node, gpu-type, zone, transient)")
        try:
            from trainmaster.engines.ray.engine import RayEngine
        except ImportError as exc:
            raise SpecError("--engine", f"ray is not installed ({exc})", "pip install 'trainmaster[ray]'") from None
        return RayEngine(run_dir=run_dir, address=os.environ.get(RAY_ADDRESS), ledger_journal=ledger_journal)
    raise SpecError("--engine", f"unknown engine {name!r}", f"use one of {', '.join(ENGINES)}")
