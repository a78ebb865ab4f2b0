"""A set of nodes, and the shorthand and YAML forms that describe one.

Other sources (Tiresias cluster CSVs, the Alibaba PAI machine list) live in
`trainmaster.workloads.clusters` and return the same `Cluster`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property

from trainmaster.core.errors import SpecError
from trainmaster.core.node import Node
from trainmaster.core.resources import Resources, parse_cpu, parse_memory

# Per-GPU host share used by the shorthand: an AWS g4dn.12xlarge (the Pollux
# profiles' machine) has 48 vCPU and 192 GiB for 4 T4 GPUs.
CPU_PER_GPU = 12
MEMORY_PER_GPU = 48 * 2**30
_GROUP = re.compile(r"^(\d+)x(\d+)(?::([A-Za-z0-9_-]+))?$")


@dataclass(frozen=True)
class Cluster:
    """An ordered, immutable set of nodes with unique names."""

    nodes: tuple[Node, ...]
    _by_name: dict[str, Node] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        by_name: dict[str, Node] = {}
        for node in self.nodes:
            if node.name in by_name:
                raise SpecError(f"nodes.{node.name}", "duplicate node name", "give each node its own name")
            by_name[node.name] = node
        object.__setattr__(self, "_by_name", by_name)

    def node(self, name: str) -> Node:
        return self._by_name[name]

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __len__(self) -> int:
        return len(self.nodes)

    @cached_property
    def total(self) -> Resources:
        out = Resources()
        for node in self.nodes:
            out = out + node.capacity
        return out

    @cached_property
    def gpu_types(self) -> frozenset[str]:
        return frozenset(n.gpu_type for n in self.nodes if n.gpu_type)

    def with_nodes(self, nodes: Iterable[Node]) -> Cluster:
        return Cluster(tuple(nodes))


def parse_shorthand(spec: str) -> Cluster:
    """`16x4` = 16 nodes of 4 GPUs; groups join with `+`; `:type` names the GPU type.

    Example: `311x8:v100+2x1:v100`. Each node gets CPU_PER_GPU cores and
    MEMORY_PER_GPU bytes per GPU (at least one GPU's worth).
    """
    nodes: list[Node] = []
    for group_index, group in enumerate(spec.strip().split("+")):
        m = _GROUP.match(group.strip())
        if not m:
            raise SpecError("cluster", f"{spec!r} is not a cluster spec",
                            "write NODESxGPUS like 16x4, groups joined with +, or a path to a YAML/CSV file")
        count, gpus, gpu_type = int(m.group(1)), int(m.group(2)), m.group(3)
        if count <= 0:
            raise SpecError("cluster", f"group {group!r} has no nodes", "use at least 1 node")
        share = max(gpus, 1)
        for i in range(count):
            nodes.append(Node(
                name=f"n{group_index}-{i}" if "+" in spec else f"n{i}",
                capacity=Resources(cpu=CPU_PER_GPU * share * 1000, memory=MEMORY_PER_GPU * share, gpu=gpus),
                gpu_type=(gpu_type or "gpu") if gpus else None,
            ))
    return Cluster(tuple(nodes))


def cluster_from_mapping(doc: object, where: str = "cluster") -> Cluster:
    """Build a cluster from the YAML form.

    ```yaml
    nodes:
      - {name: a, count: 4, gpu: 4, gpuType: v100, cpu: 32, memory: 128Gi,
         zone: us-east1-b, transient: true, pricePerHour: 0.74, labels: {rack: r1}}
    ```
    """
    if not isinstance(doc, Mapping) or not isinstance(doc.get("nodes"), list):
        raise SpecError(f"{where}.nodes", "missing or not a list", "list the nodes under `nodes:`")
    allowed = {"name", "count", "gpu", "gpuType", "cpu", "memory", "zone", "transient", "pricePerHour", "labels"}
    nodes: list[Node] = []
    for i, item in enumerate(doc["nodes"]):
        path = f"{where}.nodes[{i}]"
        if not isinstance(item, Mapping):
            raise SpecError(path, "must be a mapping", "write {name: ..., gpu: ..., cpu: ...}")
        unknown = set(item) - allowed
        if unknown:
            raise SpecError(f"{path}.{sorted(unknown)[0]}", "unknown field", f"use one of {sorted(allowed)}")
        name = str(item.get("name", f"node{i}"))
        count = item.get("count", 1)
        gpu = item.get("gpu", 0)
        for key, value in (("count", count), ("gpu", gpu)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise SpecError(f"{path}.{key}", f"{value!r} is not a whole number >= 0", "write e.g. 4")
        price = item.get("pricePerHour", 0.0)
        if not isinstance(price, (int, float)) or price < 0:
            raise SpecError(f"{path}.pricePerHour", f"{price!r} is not a price", "write e.g. 0.74")
        labels = item.get("labels", {}) or {}
        if not isinstance(labels, Mapping):
            raise SpecError(f"{path}.labels", "must be a mapping", "write {key: value}")
        capacity = Resources(
            cpu=parse_cpu(item.get("cpu", CPU_PER_GPU * max(gpu, 1)), f"{path}.cpu"),
            memory=parse_memory(item.get("memory", MEMORY_PER_GPU * max(gpu, 1)), f"{path}.memory"),
            gpu=gpu,
        )
        for k in range(count):
            nodes.append(Node(
                name=name if count == 1 else f"{name}-{k}",
                capacity=capacity,
                gpu_type=str(item.get("gpuType", "gpu")) if gpu else None,
                zone=str(item.get("zone", "zone-a")),
                transient=bool(item.get("transient", False)),
                price_per_hour=float(price),
                labels=tuple(sorted((str(a), str(b)) for a, b in labels.items())),
            ))
    if not nodes:
        raise SpecError(f"{where}.nodes", "is empty", "list at least one node")
    return Cluster(tuple(nodes))
