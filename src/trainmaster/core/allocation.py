"""Where a job's tasks run: a normalized multiset of (role, node) placements."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from itertools import chain
from operator import attrgetter
from typing import Any, ClassVar

from trainmaster.core.job import JobSpec, Role
from trainmaster.core.resources import Resources

_NODE = attrgetter("node")
_ORDER = attrgetter("role.value", "node")  # `Placement.__lt__`'s key, read in C
_ZERO = Resources()
_NEW, _SETATTR = object.__new__, object.__setattr__


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

    # The memos of `per_node`, `resources` and `gpus` for the last spec asked about: one list [spec, per node,
    # total, GPUs] (None: not computed yet) as the attribute "_memo", not a field (equality and hashing ignore
    # it). One object where three tuples were: a busy decision remembers thousands of placements, each a tracked
    # object the collector passes over. Read and set as an attribute (`object.__setattr__`: `frozen` guards the
    # class's own), never through `__dict__`: an instance's attributes live in the object itself until its
    # `__dict__` is asked for, and asking builds a dict, one more object per allocation (`on_node` alike).
    _memo: ClassVar[list[Any] | None] = None

    def _memo_for(self, spec: JobSpec) -> list[Any]:
        memo = self._memo
        if memo is None or memo[0] is not spec:
            memo = [spec, None, None, None]
            _SETATTR(self, "_memo", memo)
        return memo

    def per_node(self, spec: JobSpec) -> dict[str, Resources]:
        """Resources this allocation takes on each node. Read-only: cached for the last spec asked about."""
        memo = self._memo
        if memo is not None and memo[0] is spec and memo[1] is not None:
            out: dict[str, Resources] = memo[1]
            return out
        out = {}
        for (role, node), n in self.counts.items():
            role_spec = spec.roles[role]
            out[node] = out.get(node, _ZERO) + role_spec.resources * n
        self._memo_for(spec)[1] = out
        return out

    def resources(self, spec: JobSpec) -> Resources:
        """What the allocation takes in all (cached for the last spec asked about, like `per_node`)."""
        memo = self._memo
        if memo is not None and memo[0] is spec and memo[2] is not None:
            total: Resources = memo[2]
            return total
        total = Resources()
        for part in self.per_node(spec).values():
            total = total + part
        self._memo_for(spec)[2] = total
        return total

    def gpus(self, spec: JobSpec) -> int:
        memo = self._memo
        if memo is not None and memo[0] is spec and memo[3] is not None:
            n: int = memo[3]
            return n
        n = _gpus_of(spec, self.role_counts)
        self._memo_for(spec)[3] = n
        return n

    def remember(self, spec: JobSpec, per_node: dict[str, Resources], total: Resources) -> Allocation:
        """Fill the memos of `per_node`, `resources` and `gpus` for `spec` with what a caller that built the
        allocation already knows (the same values they would compute); returns the allocation."""
        _SETATTR(self, "_memo", [spec, per_node, total, total.gpu])
        return self

    def describe(self) -> str:
        """`worker=2@n0,n1 ps=1@n0` style summary."""
        parts = []
        for role in Role:
            nodes = [t.node for t in self.tasks if t.role is role]
            if nodes:
                parts.append(f"{role.value}={len(nodes)}@{','.join(sorted(set(nodes)))}")
        return " ".join(parts) or "none"


def _gpus_of(spec: JobSpec, role_counts: Mapping[Role, int]) -> int:
    """`Allocation.gpus` computed (a function of its own: its generator would make `spec` a cell of `gpus`,
    built at every call, memo found or not)."""
    return sum(spec.roles[role].resources.gpu * k for role, k in role_counts.items())


EMPTY = Allocation()


_SET_ROLE = Placement.__dict__["role"].__set__  # the slots' own setters (`frozen` guards `__setattr__` only)
_SET_NODE = Placement.__dict__["node"].__set__


Runs = dict[tuple[Role, str, int], tuple[Placement, ...]]  # (role, node, n) -> n equal placements (`on_node`)


def on_node(role: Role, node: str, n: int, runs: Runs | None = None) -> Allocation:
    """`Allocation.of(Placement(role, node) for _ in range(n))` without the frozen dataclasses' `__init__` frames
    (each field set through `object.__setattr__`) nor a sort (equal placements): a gang placed on one node, the
    result of most searches. Equal to it and hashing alike.

    `runs`: the tasks tuples built so far, shared (immutable: an allocation compares and hashes by value), so a
    start on a node with a gang size seen before builds no placement nor tuple, two objects the collector
    tracks of the ~8 a start leaves (thousands per busy decision)."""
    tasks = runs.get((role, node, n)) if runs is not None else None
    if tasks is None:
        task = _NEW(Placement)
        _SET_ROLE(task, role)
        _SET_NODE(task, node)
        tasks = (task,) * n
        if runs is not None:
            runs[role, node, n] = tasks
    out = _NEW(Allocation)
    _SETATTR(out, "tasks", tasks)
    return out


def on_nodes(role: Role, counts: Mapping[str, int]) -> Allocation:
    """`Allocation.of` of `counts[node]` tasks of `role` on each node (a one-role gang spread over nodes): `on_node`'s
    runs in node order, so no placement is sorted nor built by an `__init__` frame. Equal to it and hashing alike."""
    out = _NEW(Allocation)
    runs = (on_node(role, node, counts[node]).tasks for node in sorted(counts))
    _SETATTR(out, "tasks", tuple(chain.from_iterable(runs)))
    return out
