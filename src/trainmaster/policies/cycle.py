"""The scheduling cycle: numbered phases, each a hook that presets fill.

Combining rule: `order` decides who is served first, `size` how many replicas
each job wants, `place` commits gang placements in that order and returns the
jobs it could not place; the `after` hooks run in sequence on those blocked
jobs (preemption, reclaim, reservation and backfill), each returning the jobs
still blocked. The controller diffs the resulting plan into actions (phase 6).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from trainmaster.core.job import Role
from trainmaster.policies.snapshot import JobView, Plan, Snapshot
from trainmaster.policies.workspace import Workspace, never_fits

Sizes = dict[str, dict[Role, int]]
OrderHook = Callable[[Snapshot], list[JobView]]
SizeHook = Callable[[Snapshot, list[JobView], Workspace], Sizes]
PlaceHook = Callable[[Snapshot, list[JobView], Mapping[str, Mapping[Role, int]], Workspace], list[JobView]]
AfterHook = Callable[[Snapshot, list[JobView], Workspace], list[JobView]]


def by_submit_time(snap: Snapshot) -> list[JobView]:
    """FIFO order: submit time, then id."""
    return sorted(snap.jobs.values(), key=lambda j: (j.submit_time, j.id))


def current_or_min(snap: Snapshot, jobs: list[JobView], ws: Workspace) -> Sizes:
    """Fixed sizing: running jobs keep their replicas, pending jobs ask for their minimum."""
    sizes: Sizes = {}
    for job in jobs:
        if job.active and job.allocation:
            sizes[job.id] = {role: job.count(role) for role in job.spec.roles}
        else:
            sizes[job.id] = {role: spec.min for role, spec in job.spec.roles.items()}
    return sizes


def describe_wait(job: JobView, want: Mapping[Role, int], ws: Workspace) -> str:
    need = sum((job.spec.roles[r].resources * n for r, n in want.items()), start=type(ws.total_free)())
    return f"gang: needs {need} for {sum(want.values())} task(s); {ws.total_free} free"


def place_in_order(strict: bool) -> PlaceHook:
    """Place jobs whole, in order. `strict`: the first job that does not fit blocks all later pending ones."""

    def place(snap: Snapshot, jobs: list[JobView], sizes: Mapping[str, Mapping[Role, int]],
              ws: Workspace) -> list[JobView]:
        blocked: list[JobView] = []
        head: JobView | None = None
        for job in jobs:
            want = sizes.get(job.id)
            if want is None:
                continue
            if head is not None and not (job.active and job.id in ws.allocations):
                ws.reasons[job.id] = f"fifo: waiting behind {head.id}"
                blocked.append(job)
                continue
            held = ws.allocations.get(job.id)
            if held and all(held.count(r) == n for r, n in want.items()):
                continue  # keeps what it holds
            alloc = ws.place(job, want)
            if alloc is None:
                if held:  # cannot resize: keep the current allocation
                    continue
                ws.reasons[job.id] = describe_wait(job, want, ws)
                blocked.append(job)
                if strict and head is None:
                    head = job
        return blocked

    return place


@dataclass
class Cycle:
    """A policy assembled from phase hooks (see the module docstring for how they combine)."""

    name: str
    order: OrderHook = by_submit_time
    size: SizeHook = current_or_min
    place: PlaceHook = field(default_factory=lambda: place_in_order(strict=True))
    after: tuple[AfterHook, ...] = ()
    preemptive: bool = False  # True: every cycle re-decides all jobs from an empty cluster
    interval: float | None = None
    _never: dict[tuple[str, int], str | None] = field(default_factory=dict, repr=False)

    def admit(self, snap: Snapshot, ws: Workspace) -> list[JobView]:
        """Phase 2: reject jobs that can never fit (with the reason); order the rest."""
        admitted = []
        for job in self.order(snap):
            key = (job.id, id(snap.cluster))
            if key not in self._never:
                self._never[key] = never_fits(job.spec, snap) if job.pending else None
            reason = self._never[key]
            if reason:
                ws.rejected[job.id] = reason
            else:
                admitted.append(job)
        return admitted

    def decide(self, snap: Snapshot) -> Plan:
        ws = Workspace(snap, empty=self.preemptive)  # 1. scratch copy of the snapshot
        jobs = self.admit(snap, ws)  # 2. admit: reject what never fits, order the rest
        sizes = self.size(snap, jobs, ws)  # 3. size: replicas per role per job
        blocked = self.place(snap, jobs, sizes, ws)  # 4. place: whole gangs, fewest nodes
        for hook in self.after:  # 5. preempt / reclaim / reserve and backfill
            blocked = hook(snap, blocked, ws)
        return ws.plan()  # 6. the controller diffs the plan into actions
