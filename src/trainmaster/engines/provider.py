"""How a cluster grows and shrinks: a `NodeProvider` makes nodes like a template and takes them back.

The controller's autoscaler asks; the engine reports the result as events, so
every engine looks the same from above: a requested node joins as `NodeAdded`
after its type's boot delay, a released one leaves as `NodeLost`. Nodes a
provider did not make (on-premises) are never released through it.
"""

from __future__ import annotations

import itertools
from typing import Protocol

from trainmaster.core.clock import Clock
from trainmaster.core.market import Market, NodeType, available_at
from trainmaster.core.node import Node


class NodeProvider(Protocol):
    def request(self, node_type: NodeType, transient: bool) -> Node | None:
        """Start one node of `node_type`; returns the node that will join, or None when the market has none now."""
        ...

    def release(self, name: str) -> None:
        """Give back a node this provider made; `NodeLost` follows."""
        ...

    def made(self, name: str) -> bool:
        """Whether this provider made node `name` (only those may be released)."""
        ...


class Provisionable(Protocol):
    """An engine whose nodes can come and go on request (the simulator, the local and Ray engines)."""

    @property
    def clock(self) -> Clock: ...

    @property
    def market(self) -> Market | None: ...

    def add_node(self, node: Node, at: float | None = None) -> None: ...

    def remove_node(self, name: str) -> None: ...

    def nodes_and_booting(self) -> list[Node]: ...


class EngineProvider:
    """Makes nodes in an engine: a requested node joins after its type's boot delay on the engine's clock
    (virtual nodes on the local engine, simulated ones in the simulator); with a replayed availability
    trace, never more transient ones than it allows."""

    def __init__(self, engine: Provisionable) -> None:
        self.engine = engine
        self._mine: set[str] = set()
        self._ids = itertools.count(1)
        self.requested = 0
        self.released = 0

    def request(self, node_type: NodeType, transient: bool) -> Node | None:
        now = self.engine.clock.now()
        market = self.engine.market
        if transient and market is not None:
            limit = available_at(market.availability(), now, node_type.zone, node_type.gpu_type)
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
