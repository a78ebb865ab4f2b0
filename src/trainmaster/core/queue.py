"""Queues: a tenant's line with a weight, a quota, an optional parent and a priority.

YAML form (`queues:` is a list; every field but `name` is optional):

```yaml
queues:
  - name: research
    weight: 2
    quota: {gpu: 16, cpu: 192, memory: 768Gi}
    gpuTypes: {v100: 8}        # per-GPU-type quota (GPUs of that type)
    parent: org                # usage counts against the parent's quota too
    priority: 10               # queue priority: breaks fair-share ties, raises its jobs
    borrowing: true            # may run above its quota on capacity other queues leave idle
```

`quota` is what the queue is guaranteed; a queue with `borrowing: false` never
goes above it, one with `borrowing: true` may use idle capacity beyond it, and
that borrowed part is what other queues may reclaim (Kueue's nominal quota and
cohort borrowing; Volcano's deserved share and reclaim).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from trainmaster.core.errors import SpecError
from trainmaster.core.resources import Resources
from trainmaster.core.spec import load_yaml_text

UNLIMITED = 1 << 62  # a quota field the YAML leaves out does not limit
_FIELDS = {"name", "weight", "quota", "gpuTypes", "parent", "priority", "borrowing"}


@dataclass(frozen=True, slots=True)
class QueueSpec:
    """One queue. `quota=None` means no limit of its own; `gpu_quota` caps GPUs per GPU type."""

    name: str
    weight: float = 1.0
    quota: Resources | None = None
    gpu_quota: tuple[tuple[str, int], ...] = ()
    parent: str | None = None
    priority: int = 0
    borrowing: bool = True
    _gpu: dict[str, int] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_gpu", dict(self.gpu_quota))

    def gpu_type_quota(self, gpu_type: str) -> int | None:
        return self._gpu.get(gpu_type)

    def quota_text(self) -> str:
        """The quota's limited fields only, e.g. `gpu=8,cpu=96`."""
        if self.quota is None:
            return "none"
        q = self.quota
        shown = Resources(*(0 if v >= UNLIMITED else v for v in (q.cpu, q.memory, q.gpu)))
        return str(shown) if not shown.is_zero() else "unlimited"


def parse_quota(doc: Mapping[str, object], where: str) -> Resources:
    """A quota mapping; fields left out are unlimited."""
    parsed = Resources.parse(doc, where)
    return Resources(cpu=parsed.cpu if "cpu" in doc else UNLIMITED,
                     memory=parsed.memory if "memory" in doc else UNLIMITED,
                     gpu=parsed.gpu if "gpu" in doc else UNLIMITED)


def _number(value: object, field_name: str, *, positive: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SpecError(field_name, f"{value!r} is not a number", "write e.g. 1 or 2.5")
    if value < 0 or (positive and value == 0):
        raise SpecError(field_name, "must be positive" if positive else "must not be negative",
                        "use a number above 0" if positive else "use 0 or more")
    return float(value)


def _queue(item: object, where: str) -> QueueSpec:
    if not isinstance(item, Mapping):
        raise SpecError(where, "must be a mapping", "write {name: research, weight: 2, quota: {gpu: 8}}")
    unknown = set(item) - _FIELDS
    if unknown:
        raise SpecError(f"{where}.{sorted(unknown)[0]}", "unknown field", f"use one of {sorted(_FIELDS)}")
    name = item.get("name")
    if not isinstance(name, str) or not name.strip():
        raise SpecError(f"{where}.name", "is required", "name the queue, e.g. name: research")
    quota_doc = item.get("quota")
    if quota_doc is not None and not isinstance(quota_doc, Mapping):
        raise SpecError(f"{where}.quota", "must be a mapping", "write e.g. quota: {gpu: 8, cpu: 96}")
    gpu_types = item.get("gpuTypes", {}) or {}
    if not isinstance(gpu_types, Mapping):
        raise SpecError(f"{where}.gpuTypes", "must be a mapping", "write e.g. gpuTypes: {v100: 8}")
    per_type: list[tuple[str, int]] = []
    for gpu_type, count in gpu_types.items():
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise SpecError(f"{where}.gpuTypes.{gpu_type}", f"{count!r} is not a whole number >= 0", "write e.g. 8")
        per_type.append((str(gpu_type), count))
    priority = item.get("priority", 0)
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise SpecError(f"{where}.priority", f"{priority!r} is not a whole number", "write e.g. 10")
    borrowing = item.get("borrowing", True)
    if not isinstance(borrowing, bool):
        raise SpecError(f"{where}.borrowing", f"{borrowing!r} is not true or false", "write true or false")
    parent = item.get("parent")
    if parent is not None and not isinstance(parent, str):
        raise SpecError(f"{where}.parent", f"{parent!r} is not a queue name", "name another queue")
    return QueueSpec(
        name=name.strip(),
        weight=_number(item.get("weight", 1.0), f"{where}.weight", positive=True),
        quota=None if quota_doc is None else parse_quota(quota_doc, f"{where}.quota"),
        gpu_quota=tuple(sorted(per_type)),
        parent=parent,
        priority=priority,
        borrowing=borrowing,
    )


def queues_from_mapping(doc: object, where: str = "queues") -> dict[str, QueueSpec]:
    """Validate the `queues:` document: unique names, known parents, no cycles, children within parents."""
    items = doc.get("queues") if isinstance(doc, Mapping) else doc
    if not isinstance(items, list) or not items:
        raise SpecError(where, "missing or not a list", "list the queues under `queues:`")
    out: dict[str, QueueSpec] = {}
    for i, item in enumerate(items):
        queue = _queue(item, f"{where}[{i}]")
        if queue.name in out:
            raise SpecError(f"{where}[{i}].name", f"duplicate queue {queue.name!r}", "give each queue its own name")
        out[queue.name] = queue
    for name, queue in out.items():
        if queue.parent is None:
            continue
        if queue.parent not in out:
            raise SpecError(f"{where}.{name}.parent", f"unknown queue {queue.parent!r}",
                            f"use one of {', '.join(sorted(out))}")
        seen = {name}
        up: str | None = queue.parent
        while up is not None:
            if up in seen:
                raise SpecError(f"{where}.{name}.parent", "queues form a cycle", "make the hierarchy a tree")
            seen.add(up)
            up = out[up].parent
        parent = out[queue.parent]
        if queue.quota is not None and parent.quota is not None and not queue.quota.fits_in(parent.quota):
            raise SpecError(f"{where}.{name}.quota",
                            f"{queue.quota_text()} is more than its parent's {parent.quota_text()}",
                            "keep a child's quota within its parent's")
    return out


def load_queues(path: str | Path) -> dict[str, QueueSpec]:
    """Read and validate a queues YAML file."""
    p = Path(path)
    if not p.is_file():
        raise SpecError(str(p), "no such file", "check the path to the queues YAML")
    return queues_from_mapping(load_yaml_text(p.read_text(), str(p)), str(p))


def ancestry(queues: Mapping[str, QueueSpec], name: str) -> list[QueueSpec]:
    """The queue and its ancestors, root last."""
    out: list[QueueSpec] = []
    current: str | None = name
    while current is not None and current in queues:
        out.append(queues[current])
        current = queues[current].parent
    return out
