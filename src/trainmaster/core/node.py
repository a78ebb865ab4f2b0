"""A machine the scheduler can place tasks on."""

from __future__ import annotations

from dataclasses import dataclass, field

from trainmaster.core.resources import Resources


@dataclass(frozen=True, slots=True)
class Node:
    """One machine: capacity, GPU type, zone, transient flag, price and labels."""

    name: str
    capacity: Resources
    gpu_type: str | None = None
    zone: str = "zone-a"
    transient: bool = False
    price_per_hour: float = 0.0
    labels: tuple[tuple[str, str], ...] = field(default=())

    def label(self, key: str) -> str | None:
        return dict(self.labels).get(key)
