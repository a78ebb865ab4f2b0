"""The scheduling cycle: numbered phases, each a hook that presets fill.

Combining rule: `order` decides who is served first, `size` how many replicas
each job wants, `place` commits gang placements in that order and returns the
jobs it could not place; the `after` hooks run in sequence on those blocked
jobs (preemption, reclaim, reservation and backfill), each returning the jobs
still blocked. The controller diffs the resulting plan into actions (phase 6).
The order is kept as `Workspace.rank` (who may preempt whom) and the sizes as
`Workspace.want`, so the `after` hooks see them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from operator import attrgetter
from time import perf_counter
from types import MappingProxyType

from trainmaster.core.allocation import Allocation
from trainmaster.core.job import Role, RoleSpec
from trainmaster.policies.snapshot import JobView, Plan, Snapshot
from trainmaster.policies.workspace import Workspace, never_fits

Sizes = dict[str, dict[Role, int]]
OrderHook = Callable[[Snapshot], list[JobView]]
SizeHook = Callable[[Snapshot, list[JobView], Workspace], Sizes]
PlaceHook = Callable[[Snapshot, list[JobView], Mapping[str, Mapping[Role, int]], Workspace], list[JobView]]
AfterHook = Callable[[Snapshot, list[JobView], Workspace], list[JobView]]


_SUBMIT_ORDER = attrgetter("submit_time", "id")


def by_submit_time(snap: Snapshot) -> list[JobView]:
    """FIFO order: submit time, then id."""
    return sorted(snap.jobs.values(), key=_SUBMIT_ORDER)


_MINIMA: dict[int, tuple[Mapping[Role, RoleSpec], dict[Role, int]]] = {}


def _minimum(roles: Mapping[Role, RoleSpec]) -> dict[Role, int]:
    """A fresh `{role: min}` of a role mapping (memoized per mapping: trace jobs share them)."""
    entry = _MINIMA.get(id(roles))
    if entry is None or entry[0] is not roles:
        if len(_MINIMA) > 4096:
            _MINIMA.clear()
        entry = _MINIMA[id(roles)] = (roles, {role: spec.min for role, spec in roles.items()})
    return dict(entry[1])


def current_or_min(snap: Snapshot, jobs: list[JobView], ws: Workspace) -> Sizes:
    """Fixed sizing: running jobs keep their replicas, pending jobs ask for their minimum."""
    sizes: Sizes = {}
    for job in jobs:
        alloc = job.allocation
        if alloc and job.active:
            counts = alloc.role_counts
            if len(counts) == 1 and len(job.spec.roles) == 1:  # one role (most jobs): a copy will do
                sizes[job.id] = dict(counts)
            else:
                sizes[job.id] = {role: counts.get(role, 0) for role in job.spec.roles}
        else:
            sizes[job.id] = _minimum(job.spec.roles)
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
        behind = ""
        for job in jobs:
            want = sizes.get(job.id)
            if want is None:
                continue
            if head is not None and not (job.active and job.id in ws.allocations):
                ws.reasons[job.id] = behind
                blocked.append(job)
                continue
            held = ws.allocations.get(job.id)
            if held and (held.role_counts == want or all(held.count(r) == n for r, n in want.items())):
                continue  # keeps what it holds
            alloc = ws.place(job, want)
            if alloc is None:
                if held:  # cannot resize: keep the current allocation
                    continue
                ws.reasons[job.id] = describe_wait(job, want, ws)
                blocked.append(job)
                if strict and head is None:
                    head = job
                    behind = f"fifo: waiting behind {head.id}"
        return blocked

    return place


def preempt_lower(snap: Snapshot, blocked: list[JobView], ws: Workspace) -> list[JobView]:
    """Priority preemption: a blocked job evicts jobs ranked after it, lowest first, until its gang fits.

    A job that would not fit even with every lower-ranked job gone evicts
    nobody. Evicted jobs are then placed again wherever they still fit (work
    conservation, possibly a migration); the others wait. Blocked jobs are
    served in rank order, so the resources held below the current one only
    shrink: one pass over the holders, however many jobs are blocked.
    """
    if not blocked:
        return []
    last = len(ws.rank)
    holders = sorted(ws.allocations, key=lambda jid: ws.rank.get(jid, last))  # victims come off the end
    held = {jid: ws.allocations[jid].resources(snap.jobs[jid].spec) for jid in holders}
    below = sum(held.values(), start=type(ws.total_free)())  # held by holders[cursor:end]
    cursor, end = 0, len(holders)
    still: list[JobView] = []
    evicted: list[JobView] = []
    for job in sorted(blocked, key=lambda j: ws.rank.get(j.id, last)):
        mine = ws.rank.get(job.id, last)
        while cursor < end and ws.rank.get(holders[cursor], last) <= mine:
            below = below - held[holders[cursor]]
            cursor += 1
        want = ws.want.get(job.id)
        if want is None or job.id in ws.allocations:
            still.append(job)
            continue
        demand = sum((job.spec.roles[r].resources * n for r, n in want.items()), start=type(ws.total_free)())
        if not demand.fits_in(ws.total_free + below):
            still.append(job)
            continue
        alloc = ws.find(job, want)  # earlier evictions may have made room already
        released: list[tuple[JobView, Allocation]] = []
        k = end
        while alloc is None and k > cursor:
            k -= 1
            victim = snap.jobs[holders[k]]
            released.append((victim, ws.allocations[victim.id]))
            ws.release(victim)
            alloc = ws.find(job, want)
        if alloc is None:  # fragmentation: even all of them would not make room
            for victim, was in released:
                ws.assign(victim, was)
            still.append(job)
            continue
        ws.assign(job, alloc)
        end = k if released else end
        for victim, _ in released:
            below = below - held[victim.id]
            ws.reasons[victim.id] = f"preempted: {job.id} has higher priority"
            evicted.append(victim)
        if released:
            ws.reasons[job.id] = f"placed by preempting {len(released)} lower-priority job(s)"
    for victim in sorted(evicted, key=lambda j: ws.rank.get(j.id, last)):
        want = ws.want.get(victim.id)
        if want is not None and ws.place(victim, want) is not None:
            ws.reasons[victim.id] = "moved to make room for a higher-priority job"
        else:
            still.append(victim)
    return still


_UNSEEN = "?"  # `Cycle._never` has no verdict yet (a verdict is None or a non-empty reason)


def _pending_only(snap: Snapshot) -> Snapshot:
    """The snapshot with only its pending jobs (free capacity still counts what running jobs hold)."""
    if snap.pending_ids is not None:
        jobs = {jid: snap.jobs[jid] for jid in snap.pending_ids}
    else:
        jobs = {jid: j for jid, j in snap.jobs.items() if j.pending}
    return replace(snap, jobs=MappingProxyType(jobs))


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
    # True: running jobs keep what they hold and the order/size/place hooks see only pending
    # jobs. Only for policies that never preempt, resize or grow a running job (fifo); it
    # spares them a pass over every running job per decision, which dominates large replays.
    pending_only: bool = False
    _never: dict[tuple[str, int], str | None] = field(default_factory=dict, repr=False)

    def admit(self, snap: Snapshot, ws: Workspace) -> list[JobView]:
        """Phase 2: reject pending jobs that can never fit (with the reason); order the rest."""
        ordered = self.order(snap)
        pending = snap.pending_ids
        if pending is None:
            pending = tuple(job.id for job in ordered if job.pending)
        never, where = self._never, id(snap.cluster)
        bad: dict[str, str] = {}
        for jid in pending:  # only pending jobs: one that holds resources fits by definition
            reason = never.get((jid, where), _UNSEEN)
            if reason is _UNSEEN:
                reason = never[(jid, where)] = never_fits(snap.jobs[jid].spec, snap)
            if reason:
                bad[jid] = reason
        if not bad:
            return list(ordered)
        admitted = []
        for job in ordered:
            if job.id in bad:
                ws.rejected[job.id] = bad[job.id]
            else:
                admitted.append(job)
        return admitted

    def decide(self, snap: Snapshot) -> Plan:
        clock = perf_counter
        t0 = clock()
        ws = Workspace(snap, empty=self.preemptive)  # 1. scratch copy of the snapshot
        seen = _pending_only(snap) if self.pending_only and not self.preemptive else snap
        t1 = clock()
        jobs = self.admit(seen, ws)  # 2. admit: reject what never fits, order the rest
        ws.rank = {job.id: i for i, job in enumerate(jobs)}
        t2 = clock()
        sizes = self.size(seen, jobs, ws)  # 3. size: replicas per role per job
        ws.want = dict(sizes)
        t3 = clock()
        blocked = self.place(seen, jobs, sizes, ws)  # 4. place: whole gangs, fewest nodes
        t4 = clock()
        for hook in self.after:  # 5. preempt / reclaim / reserve and backfill
            blocked = hook(snap, blocked, ws)
        t5 = clock()
        plan = ws.plan()  # 6. the controller diffs the plan into actions
        return Plan(allocations=plan.allocations, reasons=plan.reasons, rejected=plan.rejected, eta=plan.eta,
                    timings={"snapshot": t1 - t0, "admit": t2 - t1, "size": t3 - t2, "place": t4 - t3,
                             "after": t5 - t4, "plan": clock() - t5})
