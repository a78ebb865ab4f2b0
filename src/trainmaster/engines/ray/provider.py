"""The autoscaler's `NodeProvider` on Ray: it starts and stops Ray nodes labelled as trainmaster nodes.

A requested node is started through a cluster handle that can add and remove
Ray nodes (`ray.cluster_utils.Cluster`: a Ray cluster on one machine, as in the
tests and `make demo-ray`), with the labels `engines/ray/nodes.py` reads (name,
GPU type, zone, transient, price). It joins when Ray reports it alive: the Ray
engine's node watch turns it into `NodeAdded`, so its boot delay is however long
Ray takes. Released, it is stopped, and the watch reports `NodeLost`. On a cloud
Ray cluster nodes come from Ray's own autoscaler instead; trainmaster then only
schedules on what joins (no provider).
"""

from __future__ import annotations

import itertools
from typing import Any, Protocol

from trainmaster.core.market import NodeType
from trainmaster.core.node import Node
from trainmaster.engines.ray.nodes import LABEL


class NodeLauncher(Protocol):
    """What `ray.cluster_utils.Cluster` offers: start a node with arguments, stop it by its handle."""

    def add_node(self, **kwargs: Any) -> Any: ...

    def remove_node(self, node: Any, allow_graceful: bool = True) -> None: ...


def labels_of(node: Node) -> dict[str, str]:
    """The Ray node labels that make Ray's node read back as `node` (see `engines/ray/nodes.py`)."""
    out = {LABEL + "node": node.name, LABEL + "zone": node.zone, LABEL + "price": f"{node.price_per_hour:g}",
           LABEL + "transient": "true" if node.transient else "false"}
    if node.gpu_type:
        out[LABEL + "gpu-type"] = node.gpu_type
    return out


class RayProvider:
    """Makes and removes Ray nodes through `launcher` (extra `add_node` arguments in `node_args`)."""

    def __init__(self, launcher: NodeLauncher, **node_args: Any) -> None:
        self.launcher = launcher
        self.node_args = node_args  # e.g. node_ip_address, object_store_memory for a loopback cluster
        self._handles: dict[str, Any] = {}
        self._ids = itertools.count(1)

    def request(self, node_type: NodeType, transient: bool) -> Node | None:
        node = node_type.make(f"{node_type.name}-{'t' if transient else 'd'}{next(self._ids)}", transient)
        cap = node.capacity
        self._handles[node.name] = self.launcher.add_node(
            **self.node_args, num_cpus=cap.cpu // 1000, num_gpus=cap.gpu, labels=labels_of(node))
        return node

    def release(self, name: str) -> None:
        handle = self._handles.pop(name, None)
        if handle is None:
            raise ValueError(f"node {name} was not made by this provider; other nodes are never released")
        self.launcher.remove_node(handle)

    def made(self, name: str) -> bool:
        return name in self._handles
