"""The simulator's node provider: a requested node joins after its type's boot delay on the virtual clock."""

from __future__ import annotations

import itertools

from trainmaster.core.market import NodeType
from trainmaster.core.node import Node
from trainmaster.engines.sim.engine import SimEngine
from trainmaster.workloads.market import available_at


class SimProvider:
    """Makes nodes in a `SimEngine`; with a replayed availability trace, never more transient ones than it allows."""

    def __init__(self, engine: SimEngine) -> None:
        self.engine = engine
        self._mine: set[str] = set()
        self._ids = itertools.count(1)
        self.requested = 0
        self.released = 0

    def request(self, node_type: NodeType, transient: bool) -> Node | None:
        now = self.engine.clock.now()
        if transient and self.engine.market is not None:
            limit = available_at(self.engine.market.availability(), now, node_type.zone, node_type.gpu_type)
            if limit is not None and self._transient_count(node_type) >= limit:
                return None
        node = node_type.make(f"{node_type.name}-{'t' if transient else 'd'}{next(self._ids)}", transient)
        self._mine.add(node.name)
        self.engine.add_node(node, now + node_type.boot_delay)
        self.requested += 1
        return node

    def release(self, name: str) -> None:
        if name not in self._mine:
            raise ValueError(f"node {name} was not made by this provider; on-premises nodes are never released")
        self._mine.discard(name)
        self.released += 1
        self.engine.remove_node(name)

    def made(self, name: str) -> bool:
        return name in self._mine

    def _transient_count(self, node_type: NodeType) -> int:
        """Transient nodes of this zone and GPU type that exist or are booting."""
        return sum(1 for n in self.engine.nodes_and_booting()
                   if n.transient and n.zone == node_type.zone and n.gpu_type == node_type.gpu_type)
