"""The cloud market as data: node types with prices and boot delay, and when a transient node is revoked.

Pure data here; fitting revocation models to measured lifetimes lives in
`trainmaster.workloads.market`. Any engine can use a `Market`: the simulator
schedules the notice and the loss on its virtual clock, a real engine reads
the same `Revocation` as wall-clock times ("node X revoked at T, notice at T - 30 s").
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Protocol

from pydantic import Field, StrictBool, TypeAdapter, ValidationError

from trainmaster.core.errors import SpecError
from trainmaster.core.gce import GCE_BOOT_DELAY, GCE_NOTICE
from trainmaster.core.node import Node
from trainmaster.core.resources import MAX_GPU, Resources, parse_cpu, parse_memory
from trainmaster.core.validation import MAX_TEXT, Count, Price, Strict, first_error

# Public Google Compute Engine list prices, us-central1, USD per hour, as listed in February 2019
# (the month of the ICAC'19 lifetime measurements; cloud.google.com/compute/gpus-pricing and
# /compute/vm-instance-pricing). GPUs on-demand / preemptible: K80 0.45 / 0.135, P100 1.46 / 0.43,
# V100 2.48 / 0.74 (preemptible GPU prices were cut in January 2019; in Dec 2017 they were half of
# on-demand: K80 0.22, P100 0.73). Host n1-standard-4 (4 vCPU, 15 GB): 0.19 / 0.04 (rounded).
GPU_PRICES: dict[str, tuple[float, float]] = {  # type -> (on-demand, preemptible) per GPU-hour
    "k80": (0.45, 0.135),
    "p100": (1.46, 0.43),
    "v100": (2.48, 0.74),
}
HOST_PRICE = (0.19, 0.04)  # n1-standard-4 per hour (on-demand, preemptible)


@dataclass(frozen=True, slots=True)
class NodeType:
    """What a provider can make: one machine shape in one zone, with its two prices.

    `name` identifies the type in limits and in the names of the nodes made from it.
    """

    name: str
    capacity: Resources
    gpu_type: str | None = None
    zone: str = "zone-a"
    on_demand_price: float = 0.0  # USD per node-hour
    transient_price: float = 0.0  # USD per node-hour when preemptible/spot
    boot_delay: float = GCE_BOOT_DELAY
    notice: float = GCE_NOTICE

    def price(self, transient: bool) -> float:
        return self.transient_price if transient else self.on_demand_price

    def make(self, name: str, transient: bool) -> Node:
        """A node of this type (the labels say which type made it, so a provider can tell its own)."""
        return Node(name=name, capacity=self.capacity, gpu_type=self.gpu_type, zone=self.zone,
                    transient=transient, price_per_hour=self.price(transient),
                    labels=(("trainmaster/node-type", self.name),))


def gce_node_type(gpu_type: str, zone: str, gpus: int = 1, name: str | None = None) -> NodeType:
    """A GCE n1-standard-4 host with `gpus` GPUs of `gpu_type` at the February 2019 list prices."""
    try:
        gpu_od, gpu_pre = GPU_PRICES[gpu_type]
    except KeyError:
        raise ValueError(f"no GCE price for GPU type {gpu_type!r}; use one of {', '.join(GPU_PRICES)}") from None
    return NodeType(
        name=name or f"{gpu_type}-{zone}",
        capacity=Resources(cpu=4000, memory=15 * 2**30, gpu=gpus),
        gpu_type=gpu_type, zone=zone,
        on_demand_price=round(HOST_PRICE[0] + gpus * gpu_od, 6),
        transient_price=round(HOST_PRICE[1] + gpus * gpu_pre, 6),
    )


@dataclass(frozen=True, slots=True)
class Revocation:
    """A transient node's end: the notice at `notice_at`, the loss at `lost_at` (times on the engine's clock)."""

    node: str
    notice_at: float
    lost_at: float
    reason: str  # "revoked", or "lifetime cap" (GCE's 24 h stop)


@dataclass(frozen=True, slots=True)
class Availability:
    """One row of an availability trace: from `time` on, `available` transient nodes of this type and zone."""

    time: float
    zone: str
    gpu_type: str
    available: int


class Market(Protocol):
    """Where revocations come from: a fitted hazard (per node) or a replayed availability trace (per zone/type)."""

    notice: float

    def revocation(self, node: Node, joined_at: float) -> Revocation | None:
        """When this transient node, joined at `joined_at`, is revoked; None when it never is."""
        ...

    def availability(self) -> Sequence[Availability]:
        """Availability changes in time order (empty for a hazard model)."""
        ...


@dataclass(frozen=True, slots=True)
class Offer:
    """One kind of node a provider may make: a type, transient or on-demand, and at most `limit` of them."""

    node_type: NodeType
    transient: bool
    limit: int

    @property
    def key(self) -> str:
        return f"{self.node_type.name}/{'transient' if self.transient else 'on-demand'}"

    @property
    def price(self) -> float:
        return self.node_type.price(self.transient)


@dataclass(frozen=True, slots=True)
class AutoscaleSpec:
    """What an autoscaler may add (offers within per-offer limits), what it may spend, when it gives back."""

    offers: tuple[Offer, ...]
    idle_timeout: float = 600.0  # seconds a provider-made node may sit idle before it is released
    max_cost_per_hour: float | None = None  # price per hour of all provider-made nodes together
    budget: float | None = None  # dollars the whole cluster may spend; no node is added beyond it
    consolidate: bool = False  # empty a provider node under half used for `idle_timeout` when others hold its jobs


_Seconds = Annotated[float, Field(ge=0, le=30 * 86_400, allow_inf_nan=False)]
_Name = Annotated[str, Field(min_length=1, max_length=MAX_TEXT)]


class _TypeDoc(Strict):
    name: _Name | None = None
    gpu: Annotated[int, Field(ge=0, le=MAX_GPU)] = 1
    gpu_type: _Name | None = Field(default=None, alias="gpuType")
    zone: _Name = "zone-a"
    cpu: Any = 4
    memory: Any = "15Gi"
    on_demand_price: Price | None = Field(default=None, alias="onDemandPrice")
    transient_price: Price | None = Field(default=None, alias="transientPrice")
    boot_delay: _Seconds = Field(default=GCE_BOOT_DELAY, alias="bootDelay")
    notice: _Seconds = GCE_NOTICE
    max_on_demand: Count = Field(default=0, alias="maxOnDemand")
    max_transient: Count = Field(default=0, alias="maxTransient")


class _AutoscaleDoc(Strict):
    node_types: list[_TypeDoc] = Field(alias="nodeTypes", min_length=1)
    idle_timeout: _Seconds = Field(default=600.0, alias="idleTimeout")
    max_cost_per_hour: Price | None = Field(default=None, alias="maxCostPerHour")
    budget: Price | None = None
    consolidate: StrictBool = False


_AUTOSCALE = TypeAdapter(_AutoscaleDoc)


def autoscale_from_mapping(doc: object, where: str = "") -> AutoscaleSpec:
    """Parse the `--autoscale` YAML (see README, "Transient servers and cost"):

    ```yaml
    autoscale:
      idleTimeout: 600          # seconds a provider-made node may stay idle
      maxCostPerHour: 20        # USD per hour of all provider-made nodes together (optional)
      budget: 500               # USD the whole cluster may spend before no node is added (optional)
      consolidate: true         # move jobs off a node under half used for idleTimeout, then give it back
      nodeTypes:
        - {gpuType: k80, zone: us-central1-c, gpu: 1, maxOnDemand: 2, maxTransient: 16}
        - {name: big, gpuType: v100, gpu: 8, cpu: 64, memory: 416Gi, zone: us-west1-b,
           onDemandPrice: 21.9, transientPrice: 6.3, bootDelay: 120, maxTransient: 4}
    ```
    Prices default to the GCE list prices above when the GPU type is k80, p100 or v100.
    """
    root = f"{where}: autoscale" if where else "autoscale"
    body = doc.get("autoscale") if isinstance(doc, Mapping) else None
    if not isinstance(body, Mapping):
        raise SpecError(root, "missing or not a mapping", "put the settings under `autoscale:`")
    try:
        parsed = _AUTOSCALE.validate_python(body)
    except ValidationError as exc:
        raise first_error(exc, root, _AutoscaleDoc) from None
    offers: list[Offer] = []
    for i, t in enumerate(parsed.node_types):
        path = f"{root}.nodeTypes[{i}]"
        gpu_type = (t.gpu_type or "gpu").lower() if t.gpu else None
        listed = GPU_PRICES.get(gpu_type or "")
        prices = []
        for given, j, field, used in ((t.on_demand_price, 0, "onDemandPrice", t.max_on_demand),
                                      (t.transient_price, 1, "transientPrice", t.max_transient)):
            if given is not None:
                prices.append(float(given))
            elif not used:  # no node of this kind may be made: its price does not matter
                prices.append(0.0)
            elif listed is not None:
                prices.append(round(HOST_PRICE[j] + t.gpu * listed[j], 6))
            else:
                raise SpecError(f"{path}.{field}", "is required for this GPU type",
                                f"write the USD price per node-hour (listed types: {', '.join(GPU_PRICES)})")
        if t.max_on_demand + t.max_transient == 0:
            raise SpecError(path, "allows no node", "set maxOnDemand and/or maxTransient above 0")
        node_type = NodeType(
            name=t.name or f"{gpu_type or 'cpu'}-{t.zone}",
            capacity=Resources(cpu=parse_cpu(t.cpu, f"{path}.cpu"), memory=parse_memory(t.memory, f"{path}.memory"),
                               gpu=t.gpu),
            gpu_type=gpu_type, zone=t.zone, on_demand_price=prices[0], transient_price=prices[1],
            boot_delay=t.boot_delay, notice=t.notice)
        offers += [Offer(node_type, False, t.max_on_demand)] if t.max_on_demand else []
        offers += [Offer(node_type, True, t.max_transient)] if t.max_transient else []
    names = [o.key for o in offers]
    if len(set(names)) != len(names):
        raise SpecError(f"{root}.nodeTypes", "two node types share a name",
                        "give each a distinct name (default: GPUTYPE-ZONE)")
    return AutoscaleSpec(tuple(offers), parsed.idle_timeout, parsed.max_cost_per_hour, parsed.budget,
                         parsed.consolidate)


def available_at(rows: Sequence[Availability], t: float, zone: str, gpu_type: str | None) -> int | None:
    """How many transient nodes of (zone, type) the trace allows at `t`; None when it says nothing about them."""
    times = [a.time for a in rows]
    last: int | None = None
    for a in rows[: bisect.bisect_right(times, t)]:
        if a.zone == zone and a.gpu_type == trace_type(gpu_type):
            last = a.available
    return last


def trace_type(gpu_type: str | None) -> str:
    """A node's `type` in an availability trace: its GPU type, lower case, or `cpu` for a node without GPUs."""
    return (gpu_type or "cpu").lower()
