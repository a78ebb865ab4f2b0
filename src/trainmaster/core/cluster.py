"""A set of nodes, and the shorthand and YAML forms that describe one.

Other sources (Tiresias cluster CSVs, the Alibaba PAI machine list) live in
`trainmaster.workloads.clusters` and return the same `Cluster`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Annotated, Any

from pydantic import Field, StrictBool, StrictFloat, StrictInt, TypeAdapter, ValidationError

from trainmaster.core.errors import SpecError, shown
from trainmaster.core.node import Node
from trainmaster.core.resources import MAX_GPU, Resources, parse_cpu, parse_memory
from trainmaster.core.validation import MAX_TEXT, Count, Price, Strict, first_error

# Per-GPU host share used by the shorthand: an AWS g4dn.12xlarge (the Pollux
# profiles' machine) has 48 vCPU and 192 GiB for 4 T4 GPUs.
CPU_PER_GPU = 12
MEMORY_PER_GPU = 48 * 2**30
MAX_NODES = 100_000  # in one cluster: enough for any real one, small enough to build in memory
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
            raise SpecError("cluster", f"{shown(spec)} is not a cluster spec",
                            "write NODESxGPUS like 16x4, groups joined with +, or a path to a YAML/CSV file")
        if len(m.group(1)) > 6 or len(m.group(2)) > 6:
            raise SpecError("cluster", f"group {shown(group)} is too large", f"use at most {MAX_NODES} nodes")
        count, gpus, gpu_type = int(m.group(1)), int(m.group(2)), m.group(3)
        if count <= 0:
            raise SpecError("cluster", f"group {shown(group)} has no nodes", "use at least 1 node")
        if len(nodes) + count > MAX_NODES or gpus > MAX_GPU:
            raise SpecError("cluster", f"{shown(spec)} is too large",
                            f"use at most {MAX_NODES} nodes of at most {MAX_GPU} GPUs")
        share = max(gpus, 1)
        for i in range(count):
            nodes.append(Node(
                name=f"n{group_index}-{i}" if "+" in spec else f"n{i}",
                capacity=Resources(cpu=CPU_PER_GPU * share * 1000, memory=MEMORY_PER_GPU * share, gpu=gpus),
                gpu_type=(gpu_type or "gpu") if gpus else None,
            ))
    return Cluster(tuple(nodes))


_Name = Annotated[str, Field(min_length=1, max_length=MAX_TEXT)]
_LabelValue = Annotated[str, Field(max_length=MAX_TEXT)] | StrictInt | StrictFloat | StrictBool


class _NodeGroup(Strict):
    name: _Name | None = None
    count: Count = 1
    gpu: Annotated[int, Field(ge=0, le=MAX_GPU)] = 0
    gpu_type: _Name | None = Field(default=None, alias="gpuType")
    cpu: Any = None
    memory: Any = None
    zone: _Name = "zone-a"
    transient: StrictBool = False
    price_per_hour: Price = Field(default=0.0, alias="pricePerHour")
    labels: dict[_Name, _LabelValue] | None = None


_NODES = TypeAdapter(list[_NodeGroup])


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
    try:
        groups = _NODES.validate_python(doc["nodes"])
    except ValidationError as exc:
        raise first_error(exc, f"{where}.nodes", _NodeGroup) from None
    if sum(g.count for g in groups) > MAX_NODES:
        raise SpecError(f"{where}.nodes", f"more than {MAX_NODES} nodes in all", "describe a smaller cluster")
    nodes: list[Node] = []
    for i, item in enumerate(groups):
        path = f"{where}.nodes[{i}]"
        name = item.name or f"node{i}"
        capacity = Resources(
            cpu=parse_cpu(CPU_PER_GPU * max(item.gpu, 1) if item.cpu is None else item.cpu, f"{path}.cpu"),
            memory=parse_memory(MEMORY_PER_GPU * max(item.gpu, 1) if item.memory is None else item.memory,
                                f"{path}.memory"),
            gpu=item.gpu,
        )
        labels = tuple(sorted((a, str(b).lower() if isinstance(b, bool) else str(b))
                              for a, b in (item.labels or {}).items()))
        for k in range(item.count):
            nodes.append(Node(
                name=name if item.count == 1 else f"{name}-{k}",
                capacity=capacity,
                gpu_type=(item.gpu_type or "gpu") if item.gpu else None,
                zone=item.zone,
                transient=item.transient,
                price_per_hour=float(item.price_per_hour),
                labels=labels,
            ))
    if not nodes:
        raise SpecError(f"{where}.nodes", "is empty", "list at least one node")
    return Cluster(tuple(nodes))
