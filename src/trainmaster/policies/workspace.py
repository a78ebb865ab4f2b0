"""A policy's scratch pad: free capacity per node and tentative allocations.

Built from a Snapshot; mutating it never touches live state (snapshot -> plan).
All gang logic lives here: a job is placed whole (every requested task) or not at all.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from trainmaster.core.allocation import Allocation, Placement
from trainmaster.core.job import JobSpec, Role, TransientUse
from trainmaster.core.node import Node
from trainmaster.core.resources import Resources
from trainmaster.policies.snapshot import JobView, Plan, Snapshot


def eligible(node: Node, spec: JobSpec) -> bool:
    """Whether `spec` may run tasks on `node` (GPU type preference, transient use)."""
    if node.transient and spec.transient is TransientUse.NEVER:
        return False
    if spec.gpu_types and node.gpu_type is not None and spec.min_gpus > 0:
        return node.gpu_type in spec.gpu_types
    return True


def never_fits(spec: JobSpec, snap: Snapshot) -> str | None:
    """Why `spec` can never run on this cluster even when empty, or None."""
    nodes = [n for n in snap.cluster.nodes if eligible(n, spec)]
    if not nodes:
        return "no node is eligible (check gpuTypes and transient)"
    for role, role_spec in spec.roles.items():
        if role_spec.min and not any(role_spec.resources.fits_in(n.capacity) for n in nodes):
            return f"one {role.value} needs {role_spec.resources}, more than any eligible node has"
    total = Resources()
    for n in nodes:
        total = total + n.capacity
    if not spec.min_resources.fits_in(total):
        return f"needs {spec.min_resources} at minimum, the eligible cluster has {total}"
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
            self.free = dict(snap.free)
            self.allocations = {j.id: j.allocation for j in snap.jobs.values() if j.active}
        self.total_free = Resources()
        for r in self.free.values():
            self.total_free = self.total_free + r
        self.reasons: dict[str, str] = {}
        self.rejected: dict[str, str] = {}
        self.eta: dict[str, float] = {}

    # -- bookkeeping -------------------------------------------------------
    def _take(self, spec: JobSpec, alloc: Allocation, sign: int) -> None:
        for node, res in alloc.per_node(spec).items():
            if sign > 0:
                self.free[node] = self.free[node] - res
                self.total_free = self.total_free - res
            else:
                self.free[node] = self.free[node] + res
                self.total_free = self.total_free + res

    def assign(self, job: JobView, alloc: Allocation) -> None:
        """Record `alloc` for `job`, replacing any tentative allocation it had."""
        self.release(job)
        self._take(job.spec, alloc, +1)
        self.allocations[job.id] = alloc

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
        free = {
            n.name: self.free[n.name] + held_per_node.get(n.name, Resources())
            for n in self.snap.cluster.nodes
            if n.name in self.free and eligible(n, spec)
        }
        preferred = [p for p in dict.fromkeys(prefer) if p in free]
        # One node if possible: preferred first, then the tightest fit.
        single = [p for p in preferred if demand.fits_in(free[p])]
        if not single:
            fitting = [name for name, res in free.items() if demand.fits_in(res)]
            if fitting:
                fitting.sort(key=lambda name: (free[name].gpu - demand.gpu, free[name].cpu - demand.cpu))
                single = fitting[:1]
        if single:
            return Allocation.of(Placement(role, single[0]) for role, n in counts.items() for _ in range(n))
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
        allocations = {jid: a for jid, a in self.allocations.items() if a}
        return Plan(allocations=allocations, reasons=dict(self.reasons), rejected=dict(self.rejected),
                    eta=dict(self.eta))
