"""How a cluster grows and shrinks: a `NodeProvider` makes nodes like a template and takes them back.

The controller's autoscaler asks; the engine reports the result as events, so
every engine looks the same from above: a requested node joins as `NodeAdded`
after its type's boot delay, a released one leaves as `NodeLost`. Nodes a
provider did not make (on-premises) are never released through it.
"""

from __future__ import annotations

from typing import Protocol

from trainmaster.core.market import NodeType
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
