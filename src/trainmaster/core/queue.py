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
from typing import Annotated, Any

from pydantic import Field, StrictBool, TypeAdapter, ValidationError

from trainmaster.core.errors import SpecError, shown
from trainmaster.core.resources import Resources
from trainmaster.core.spec import load_yaml_text
from trainmaster.core.validation import MAX_TEXT, Count, Priority, Strict, Weight, first_error

UNLIMITED = 1 << 62  # a quota field the YAML leaves out does not limit


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


class _Queue(Strict):
    name: Annotated[str, Field(min_length=1, max_length=MAX_TEXT)]
    weight: Weight = 1.0
    quota: dict[str, Any] | None = None
    gpu_types: dict[Annotated[str, Field(max_length=MAX_TEXT)], Count] | None = Field(default=None, alias="gpuTypes")
    parent: Annotated[str, Field(max_length=MAX_TEXT)] | None = None
    priority: Priority = 0
    borrowing: StrictBool = True


_QUEUES = TypeAdapter(list[_Queue])


def queues_from_mapping(doc: object, where: str = "queues") -> dict[str, QueueSpec]:
    """Validate the `queues:` document: unique names, known parents, no cycles, children within parents."""
    items = doc.get("queues") if isinstance(doc, Mapping) else doc
    if not isinstance(items, list) or not items:
        raise SpecError(where, "missing or not a list", "list the queues under `queues:`")
    try:
        models = _QUEUES.validate_python(items)
    except ValidationError as exc:
        raise first_error(exc, where, _Queue) from None
    out: dict[str, QueueSpec] = {}
    for i, item in enumerate(models):
        name = item.name.strip()
        if not name:
            raise SpecError(f"{where}[{i}].name", "is required", "name the queue, e.g. name: research")
        if name in out:
            raise SpecError(f"{where}[{i}].name", f"duplicate queue {shown(name)}", "give each queue its own name")
        out[name] = QueueSpec(
            name=name, weight=item.weight,
            quota=None if item.quota is None else parse_quota(item.quota, f"{where}[{i}].quota"),
            gpu_quota=tuple(sorted((item.gpu_types or {}).items())),
            parent=item.parent, priority=item.priority, borrowing=item.borrowing,
        )
    for name, queue in out.items():
        if queue.parent is None:
            continue
        if queue.parent not in out:
            raise SpecError(f"{where}.{name}.parent", f"unknown queue {shown(queue.parent)}",
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
