"""Where a job's tasks run: a normalized multiset of (role, node) placements."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from itertools import chain
from operator import attrgetter

from trainmaster.core.job import JobSpec, Role
from trainmaster.core.resources import Resources

_NODE = attrgetter("node")
_ORDER = attrgetter("role.value", "node")  # `Placement.__lt__`'s key, read in C
_ZERO = Resources()
_NEW = object.__new__


@dataclass(frozen=True, slots=True)
class Placement:
    role: Role
    node: str

    def __lt__(self, other: Placement) -> bool:  # enums do not order by themselves
        return (self.role.value, self.node) < (other.role.value, other.node)


@dataclass(frozen=True)
class Allocation:
    """An immutable, sorted tuple of task placements; equal allocations compare equal."""

    tasks: tuple[Placement, ...] = ()

    @classmethod
    def of(cls, tasks: Iterable[Placement]) -> Allocation:
        # (By a C-level key, not `Placement.__lt__`: the same order without a Python frame per comparison.)
        return cls(tuple(sorted(tasks, key=_ORDER)))

    def __bool__(self) -> bool:
        return bool(self.tasks)

    def __len__(self) -> int:
        return len(self.tasks)

    def count(self, role: Role) -> int:
        return self.role_counts.get(role, 0)

    @cached_property
    def role_counts(self) -> dict[Role, int]:
        """Tasks per role (roles without tasks absent). Read-only: cached and shared."""
        out: dict[Role, int] = {}
        for t in self.tasks:
            out[t.role] = out.get(t.role, 0) + 1
        return out

    @cached_property
    def counts(self) -> Counter[tuple[Role, str]]:
        return Counter((t.role, t.node) for t in self.tasks)

    @cached_property
    def nodes(self) -> tuple[str, ...]:
        return tuple(sorted({t.node for t in self.tasks}))

    @property
    def on_one_node(self) -> bool:
        """Whether every task is on one node (False without tasks): `len(nodes) == 1` without building the
        set or the sorted tuple (a C-level pass that stops at the first other node)."""
        tasks = self.tasks
        if not tasks:
            return False
        return all(map(tasks[0].node.__eq__, map(_NODE, tasks)))

    def per_node(self, spec: JobSpec) -> dict[str, Resources]:
        """Resources this allocation takes on each node. Read-only: cached for the last spec asked about."""
        cached = self.__dict__.get("_per_node")
        if cached is not None and cached[0] is spec:
            out: dict[str, Resources] = cached[1]
            return out
        out = {}
        for (role, node), n in self.counts.items():
            role_spec = spec.roles[role]
            out[node] = out.get(node, _ZERO) + role_spec.resources * n
        self.__dict__["_per_node"] = (spec, out)  # a memo, not a field: equality and hashing ignore it
        return out

    def resources(self, spec: JobSpec) -> Resources:
        """What the allocation takes in all (cached for the last spec asked about, like `per_node`)."""
        cached = self.__dict__.get("_resources")
        if cached is not None and cached[0] is spec:
            total: Resources = cached[1]
            return total
        total = Resources()
        for part in self.per_node(spec).values():
            total = total + part
        self.__dict__["_resources"] = (spec, total)
        return total

    def gpus(self, spec: JobSpec) -> int:
        cached = self.__dict__.get("_gpus")
        if cached is not None and cached[0] is spec:
            n: int = cached[1]
            return n
        n = sum(spec.roles[role].resources.gpu * k for role, k in self.role_counts.items())
        self.__dict__["_gpus"] = (spec, n)
        return n

    def remember(self, spec: JobSpec, per_node: dict[str, Resources], total: Resources) -> Allocation:
        """Fill the memos of `per_node`, `resources` and `gpus` for `spec` with what a caller that built the
        allocation already knows (the same values they would compute); returns the allocation."""
        memo = self.__dict__
        memo["_per_node"], memo["_resources"], memo["_gpus"] = (spec, per_node), (spec, total), (spec, total.gpu)
        return self

    def describe(self) -> str:
        """`worker=2@n0,n1 ps=1@n0` style summary."""
        parts = []
        for role in Role:
            nodes = [t.node for t in self.tasks if t.role is role]
            if nodes:
                parts.append(f"{role.value}={len(nodes)}@{','.join(sorted(set(nodes)))}")
        return " ".join(parts) or "none"


EMPTY = Allocation()


_SET_ROLE = Placement.__dict__["role"].__set__  # the slots' own setters (`frozen` guards `__setattr__` only)
_SET_NODE = Placement.__dict__["node"].__set__


def on_node(role: Role, node: str, n: int) -> Allocation:
    """`Allocation.of(Placement(role, node) for _ in range(n))` without the frozen dataclasses' `__init__` frames
    (each field set through `object.__setattr__`) nor a sort (equal placements): a gang placed on one node, the
    result of most searches. Equal to it and hashing alike."""
    task = _NEW(Placement)
    _SET_ROLE(task, role)
    _SET_NODE(task, node)
    out = _NEW(Allocation)
    out.__dict__["tasks"] = (task,) * n
    return out


def on_nodes(role: Role, counts: Mapping[str, int]) -> Allocation:
    """`Allocation.of` of `counts[node]` tasks of `role` on each node (a one-role gang spread over nodes): `on_node`'s
    runs in node order, so no placement is sorted nor built by an `__init__` frame. Equal to it and hashing alike."""
    out = _NEW(Allocation)
    runs = (on_node(role, node, counts[node]).tasks for node in sorted(counts))
    out.__dict__["tasks"] = tuple(chain.from_iterable(runs))
    return out
