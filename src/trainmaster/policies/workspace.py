"""A policy's scratch pad: free capacity per node and tentative allocations.

Built from a Snapshot; mutating it never touches live state (snapshot -> plan).
All gang logic lives here: a job is placed whole (every requested task) or not at all.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import TypeVar

from trainmaster.core.allocation import Allocation, Placement
from trainmaster.core.cluster import Cluster
from trainmaster.core.job import JobSpec, Role, TransientUse
from trainmaster.core.node import Node
from trainmaster.core.resources import Resources
from trainmaster.policies.snapshot import JobView, Plan, Snapshot

_V = TypeVar("_V")


def eligible(node: Node, spec: JobSpec) -> bool:
    """Whether `spec` may run tasks on `node` (GPU type preference, transient use)."""
    if node.transient and spec.transient is TransientUse.NEVER:
        return False
    if spec.gpu_types and node.gpu_type is not None and spec.min_gpus > 0:
        return node.gpu_type in spec.gpu_types
    return True


def _copy(mapping: Mapping[str, _V]) -> dict[str, _V]:
    """A dict copy, at C speed for the snapshot's read-only dict proxies."""
    if isinstance(mapping, (dict, MappingProxyType)):
        return mapping.copy()  # type: ignore[return-value]
    return dict(mapping)


class EligibleNodes:
    """The nodes of a cluster one kind of job may use, in cluster order, with their total capacity."""

    __slots__ = ("allowed", "names", "nodes", "total")

    def __init__(self, nodes: list[Node]) -> None:
        self.nodes = nodes
        self.names = tuple(n.name for n in nodes)
        self.allowed = frozenset(self.names)
        self.total = Resources()
        for n in nodes:
            self.total = self.total + n.capacity


_ELIGIBLE: dict[int, tuple[Cluster, dict[tuple[bool, tuple[str, ...]], EligibleNodes]]] = {}


def eligible_nodes(cluster: Cluster, spec: JobSpec) -> EligibleNodes:
    """`eligible` over a whole cluster, cached per cluster and per the spec fields it reads (hot path)."""
    entry = _ELIGIBLE.get(id(cluster))
    if entry is None or entry[0] is not cluster:
        if len(_ELIGIBLE) > 16:
            _ELIGIBLE.clear()
        entry = _ELIGIBLE[id(cluster)] = (cluster, {})
    key = (spec.transient is TransientUse.NEVER, spec.gpu_types if spec.min_gpus > 0 else ())
    found = entry[1].get(key)
    if found is None:
        found = entry[1][key] = EligibleNodes([n for n in cluster.nodes if eligible(n, spec)])
    return found


def never_fits(spec: JobSpec, snap: Snapshot) -> str | None:
    """Why `spec` can never run on this cluster even when empty, or None."""
    pool = eligible_nodes(snap.cluster, spec)
    nodes = pool.nodes
    if not nodes:
        return "no node is eligible (check gpuTypes and transient)"
    for role, role_spec in spec.roles.items():
        if role_spec.min and not any(role_spec.resources.fits_in(n.capacity) for n in nodes):
            return f"one {role.value} needs {role_spec.resources}, more than any eligible node has"
    total = pool.total
    if not spec.min_resources.fits_in(total):
        return f"needs {spec.min_resources} at minimum, the eligible cluster has {total}"
    return None


class _FitIndex:
    """Nodes sorted by (free GPUs, free CPU, cluster position): the tightest one-node fit is a bisect away.

    It only orders candidates; `tightest` checks each against the live free
    capacity, so a stale entry can cost tightness, never correctness.
    """

    __slots__ = ("free", "keys", "order")

    def __init__(self, free: dict[str, Resources], names: Iterable[str]) -> None:
        self.free = free  # the dict indexed; the workspace rebuilds the index if it swaps the dict
        self.keys: dict[str, tuple[int, int, int, str]] = {}
        for i, name in enumerate(names):
            r = free.get(name)
            if r is not None:
                self.keys[name] = (r.gpu, r.cpu, i, name)
        self.order = sorted(self.keys.values())

    def update(self, name: str) -> None:
        old = self.keys.get(name)
        r = self.free.get(name)
        if old is None or r is None or (r.gpu, r.cpu) == old[:2]:
            return
        del self.order[bisect.bisect_left(self.order, old)]
        new = self.keys[name] = (r.gpu, r.cpu, old[2], name)
        bisect.insort(self.order, new)

    def tightest(self, demand: Resources, allowed: frozenset[str]) -> str | None:
        """The node with the fewest free GPUs, then CPUs, that holds `demand` (first in cluster order on ties)."""
        dg, dc, dm = demand.gpu, demand.cpu, demand.memory
        for _, _, _, name in itertools.islice(self.order, bisect.bisect_left(self.order, (dg, dc)), None):
            r = self.free[name]
            if r.gpu >= dg and r.cpu >= dc and r.memory >= dm and name in allowed:
                return name
        return None


class Workspace:
    """Mutable free capacity and tentative allocations for one decision."""

    def __init__(self, snap: Snapshot, *, empty: bool = False) -> None:
        """Start from the snapshot's free capacity, or from an empty cluster (`empty=True`)."""
        self.snap = snap
        if empty:
            self.free: dict[str, Resources] = {n.name: n.capacity for n in snap.cluster.nodes}
            self.allocations: dict[str, Allocation] = {}
        else:
            self.free = _copy(snap.free)
            self.allocations = (_copy(snap.held) if snap.held is not None
                                else {j.id: j.allocation for j in snap.jobs.values() if j.active})
        self._start = self.allocations  # every entry non-empty; `assign` records what it changes
        self._assigned: set[str] = set()
        if empty:
            self.total_free = snap.cluster.total
        elif snap.free_total is not None:
            self.total_free = snap.free_total
        else:
            self.total_free = Resources()
            for r in self.free.values():
                self.total_free = self.total_free + r
        self.reasons: dict[str, str] = {}
        self.rejected: dict[str, str] = {}
        self.eta: dict[str, float] = {}
        self.rank: dict[str, int] = {}  # position in the cycle's order: lower is served first
        self._fit: _FitIndex | None = None  # built by the second `find` that scans for a node
        self._scans = 0
        self.want: dict[str, Mapping[Role, int]] = {}  # replicas per role from the size phase

    # -- bookkeeping -------------------------------------------------------
    def _take(self, spec: JobSpec, alloc: Allocation, sign: int) -> None:
        for node, res in alloc.per_node(spec).items():
            if sign > 0:
                self.free[node] = self.free[node] - res
                self.total_free = self.total_free - res
            else:
                self.free[node] = self.free[node] + res
                self.total_free = self.total_free + res
            if self._fit is not None:
                self._fit.update(node)

    def assign(self, job: JobView, alloc: Allocation) -> None:
        """Record `alloc` for `job`, replacing any tentative allocation it had."""
        self.release(job)
        self._take(job.spec, alloc, +1)
        self.allocations[job.id] = alloc
        self._assigned.add(job.id)

    def release(self, job: JobView) -> None:
        old = self.allocations.pop(job.id, None)
        if old:
            self._take(job.spec, old, -1)

    def fits(self, job: JobView, alloc: Allocation) -> bool:
        """Whether `alloc` fits in the free capacity (counting what `job` itself holds here)."""
        held = self.allocations.get(job.id)
        held_per_node = held.per_node(job.spec) if held else {}
        for node, res in alloc.per_node(job.spec).items():
            if node not in self.free:
                return False
            if not res.fits_in(self.free[node] + held_per_node.get(node, Resources())):
                return False
        return True

    # -- placement ---------------------------------------------------------
    def find(self, job: JobView, counts: Mapping[Role, int], prefer: Iterable[str] = ()) -> Allocation | None:
        """Gang placement of `counts` tasks on the fewest nodes, roles spread evenly; None if it cannot fit.

        Does not change the workspace; call `assign` to commit. Tasks the job
        already holds in this workspace count as free for it.
        """
        spec = job.spec
        demand = Resources()
        for role, n in counts.items():
            demand = demand + spec.roles[role].resources * n
        held = self.allocations.get(job.id)
        held_per_node = held.per_node(spec) if held else {}
        available = self.total_free
        for res in held_per_node.values():
            available = available + res
        if not demand.fits_in(available):
            return None
        if sum(counts.values()) == 0:
            return Allocation()
        pool = eligible_nodes(self.snap.cluster, spec)
        own = self.free
        zero = Resources()
        preferred = [p for p in dict.fromkeys(prefer) if p in pool.allowed and p in own]
        # One node if possible: preferred first, then the tightest fit (the first in cluster order on ties).
        single = next((p for p in preferred if demand.fits_in(own[p] + held_per_node.get(p, zero))), None)
        if single is None and not held_per_node and self._scans:
            # From a decision's second search on, a bisect in the fit index (building it costs
            # more than one scan, and most event-driven decisions place a single job).
            if self._fit is None or self._fit.free is not own:
                self._fit = _FitIndex(own, (n.name for n in self.snap.cluster.nodes))
            single = self._fit.tightest(demand, pool.allowed)
        elif single is None:
            self._scans += 1
            dg, dc, dm = demand.gpu, demand.cpu, demand.memory
            best: tuple[int, int] | None = None
            for name in pool.names:  # one pass, no copies: this runs for every job placed
                r = own.get(name)
                if r is None:
                    continue
                if held_per_node and name in held_per_node:
                    r = r + held_per_node[name]
                if r.gpu >= dg and r.cpu >= dc and r.memory >= dm:
                    key = (r.gpu - dg, r.cpu - dc)
                    if best is None or key < best:
                        single, best = name, key
        if single is not None:
            return Allocation.of(Placement(role, single) for role, n in counts.items() for _ in range(n))
        free = {name: own[name] + held_per_node.get(name, zero) for name in pool.names if name in own}
        return self._spread(spec, counts, free, preferred)

    def _spread(self, spec: JobSpec, counts: Mapping[Role, int], free: dict[str, Resources],
                preferred: list[str]) -> Allocation | None:
        """Greedy fill to find a small node set, then spread each role evenly over it."""
        pref = set(preferred)
        order = sorted(free, key=lambda name: (name not in pref, -free[name].gpu, -free[name].cpu, -free[name].memory))
        tasks = [role for role, n in counts.items() for _ in range(n)]
        tasks.sort(key=lambda r: (-spec.roles[r].resources.gpu, -spec.roles[r].resources.cpu))
        remaining = dict(free)
        chosen: list[str] = []
        greedy: list[Placement] = []
        todo = list(tasks)
        for name in order:
            if not todo:
                break
            rest = []
            used = False
            for role in todo:
                need = spec.roles[role].resources
                if need.fits_in(remaining[name]):
                    remaining[name] = remaining[name] - need
                    greedy.append(Placement(role, name))
                    used = True
                else:
                    rest.append(role)
            todo = rest
            if used:
                chosen.append(name)
        if todo:
            return None
        even = self._even(spec, counts, {name: free[name] for name in chosen})
        return even or Allocation.of(greedy)

    @staticmethod
    def _even(spec: JobSpec, counts: Mapping[Role, int], free: dict[str, Resources]) -> Allocation | None:
        """Round-robin each role over the chosen nodes (Optimus' even PS/worker spread)."""
        remaining = dict(free)
        names = list(free)
        out: list[Placement] = []
        for role in sorted(counts, key=lambda r: r.value):
            need = spec.roles[role].resources
            start = 0
            for _ in range(counts[role]):
                for k in range(len(names)):
                    name = names[(start + k) % len(names)]
                    if need.fits_in(remaining[name]):
                        remaining[name] = remaining[name] - need
                        out.append(Placement(role, name))
                        start = (start + k + 1) % len(names)
                        break
                else:
                    return None
        return Allocation.of(out)

    def place(self, job: JobView, counts: Mapping[Role, int]) -> Allocation | None:
        """Find and commit; prefers the nodes the job runs on now, to avoid migration."""
        current = job.allocation
        if current and all(current.count(r) == n for r, n in counts.items()) and self.fits(job, current):
            self.assign(job, current)
            return current
        alloc = self.find(job, counts, prefer=current.nodes)
        if alloc is not None:
            self.assign(job, alloc)
        return alloc

    # -- result ------------------------------------------------------------
    def plan(self) -> Plan:
        if self.allocations is self._start:  # only assigned entries can be empty: check just those
            allocations = dict(self.allocations)
            for jid in self._assigned:
                if not allocations.get(jid, True):
                    del allocations[jid]
        else:
            allocations = {jid: a for jid, a in self.allocations.items() if a}
        return Plan(allocations=allocations, reasons=dict(self.reasons), rejected=dict(self.rejected),
                    eta=dict(self.eta))
