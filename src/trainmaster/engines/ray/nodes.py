"""The cluster as Ray sees it: each alive Ray node becomes a trainmaster `Node`.

Ray gives resources (CPU, GPU, memory) and labels. A node's name is its
`trainmaster.io/node` label (else `ray-<first 8 of
its id>`); its GPU type is the `trainmaster.io/gpu-type` label, else Ray's
`accelerator_type:<T>` custom resource; its zone the `trainmaster.io/zone`
label (else `ray.io/availability-zone`); `trainmaster.io/transient: "true"`
marks a spot machine, `trainmaster.io/price` its price per hour.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from trainmaster.core.node import Node
from trainmaster.core.resources import Resources

LABEL = "trainmaster.io/"


@dataclass(frozen=True, slots=True)
class RayNode:
    node: Node
    node_id: str  # Ray's hex id: what node affinity pins to
    ip: str  # the node's address: rendezvous and parameter servers listen there


def _labels(info: Mapping[str, Any]) -> dict[str, str]:
    raw = info.get("Labels") or {}
    return {str(k): str(v) for k, v in raw.items()} if isinstance(raw, Mapping) else {}


def to_node(info: Mapping[str, Any]) -> RayNode:
    """One entry of `ray.nodes()` as a trainmaster node."""
    node_id = str(info["NodeID"])
    res: Mapping[str, float] = info.get("Resources") or {}
    labels = _labels(info)
    gpu_type = labels.get(LABEL + "gpu-type") or next(
        (k.split(":", 1)[1] for k in res if k.startswith("accelerator_type:")), None)
    zone = labels.get(LABEL + "zone") or labels.get("ray.io/availability-zone") or "zone-a"
    try:
        price = float(labels.get(LABEL + "price", "0"))
    except ValueError:
        price = 0.0
    name = labels.get(LABEL + "node") or f"ray-{node_id[:8]}"
    capacity = Resources(cpu=round(float(res.get("CPU", 0)) * 1000), memory=int(res.get("memory", 0)),
                         gpu=int(res.get("GPU", 0)))
    mine = tuple(sorted((k, v) for k, v in labels.items() if k.startswith(LABEL)))
    node = Node(name=name, capacity=capacity, gpu_type=gpu_type, zone=zone,
                transient=labels.get(LABEL + "transient", "").lower() in ("true", "1", "yes"),
                price_per_hour=price, labels=mine)
    return RayNode(node, node_id, str(info.get("NodeManagerAddress") or "127.0.0.1"))


def alive_nodes(infos: Iterable[Mapping[str, Any]]) -> dict[str, RayNode]:
    """Name -> node for every alive Ray node, by name (Ray's order varies)."""
    out: dict[str, RayNode] = {}
    for info in infos:
        if info.get("Alive"):
            found = to_node(info)
            out[found.node.name] = found
    return dict(sorted(out.items()))
