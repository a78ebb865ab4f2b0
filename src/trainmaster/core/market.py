"""The cloud market as data: node types with prices and boot delay, and when a transient node is revoked.

Pure data here; fitting revocation models to measured lifetimes lives in
`trainmaster.workloads.market`. Any engine can use a `Market`: the simulator
schedules the notice and the loss on its virtual clock, a real engine reads
the same `Revocation` as wall-clock times ("node X revoked at T, notice at T - 30 s").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from trainmaster.core.node import Node
from trainmaster.core.resources import Resources

GCE_NOTICE = 30.0  # seconds of warning GCE gives before it stops a preemptible VM
GCE_MAX_LIFETIME = 24 * 3600.0  # GCE stops every preemptible VM after 24 hours
GCE_BOOT_DELAY = 90.0  # seconds from request to a GPU VM that runs tasks (measured ~1-2 min; an assumption)

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
