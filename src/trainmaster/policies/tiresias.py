"""`tiresias`: discretized two-dimensional least-attained-service (Gu et al., NSDI'19).

Priority is attained service, GPUs x seconds held (`JobView.attained`), in two
queues. A job enters Q0; once the service it attained since entering Q0 reaches
`threshold` it drops to Q1. Within a queue, first in first served by the time
the job entered it. Preemptive: a blocked job evicts lower-ranked ones
(`preemption.preempt_lower`); work-conserving: a job that does not fit is skipped,
never blocks the ones behind it.

Starvation: a Q1 job that has waited `starvation` times its executed time
(seconds it held resources since it last entered Q0) goes back to Q0 with that
count reset, as Tiresias' STARVELIMIT does.

Defaults follow the Tiresias policy of Pollux's simulator (OSDI'21 artifact),
which this project checks its fidelity against: a 16 GPU-hour threshold and a
60 s scheduling tick (demotions take effect between events, at most once a
minute; see `Tiresias`). That simulator leaves starvation promotion off; we
keep it on with a factor of 10, which only fires for a job that waited ten
times as long as it ran (on Pollux's workloads it moves the mean JCT by 2%).
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import chain, compress, repeat
from operator import attrgetter, eq, is_, is_not, itemgetter, sub, truediv
from typing import Any, ClassVar, Protocol

from trainmaster.core.allocation import Allocation
from trainmaster.core.resources import Resources
from trainmaster.core.states import JobState
from trainmaster.policies.cycle import BlockedLine, Cycle, KeptSizes, PendingRank, place_in_order
from trainmaster.policies.pending import PendingDemand
from trainmaster.policies.preemption import preempt_lower
from trainmaster.policies.snapshot import JobView, PendingIds, Plan, Snapshot
from trainmaster.policies.workspace import copy_mapping

_KEY = attrgetter("key")
_SPEC, _MIN = attrgetter("spec"), attrgetter("min_resources")
_CPU, _MEMORY, _GPU = attrgetter("cpu"), attrgetter("memory"), attrgetter("gpu")
_ALLOCATION = attrgetter("allocation")
_QUEUE, _ATTAINED, _BASE_ATTAINED = attrgetter("queue"), attrgetter("attained"), attrgetter("base_attained")
_ID = itemgetter(-1)  # of a sort key (a lead, then the entry's key): the id, last in both
THRESHOLD = 16 * 3600.0  # GPU-seconds; Pollux's simulator's Tiresias queue threshold
STARVATION = 10.0  # promote after waiting this many times the executed time
INTERVAL = 60.0  # seconds; Pollux's simulator's scheduling interval
SortKey = tuple[Any, ...]  # an entry's place in `TiresiasOrder.keys`: its lead, then its key (comparable throughout)


@dataclass
class _Entry:
    queue: int  # 0 (high) or 1 (low)
    entered: float  # when the job joined its queue: the FIFO key
    base_attained: float  # attained service when it last entered Q0
    base_runtime: float  # seconds held when it last entered Q0
    last_active: float  # last decision time the job held resources (or its submit time)
    key: tuple[int, float, float, str] = (0, 0.0, 0.0, "")  # the sort key: queue, entered, submit time, id
    lead: SortKey = ()  # what leads `key` in `TiresiasOrder.keys` (`TiresiasOrder.lead`; else empty)

    def rekey(self, job: JobView) -> None:
        self.key = (self.queue, self.entered, job.submit_time, job.id)

    @property
    def sort_key(self) -> SortKey:
        """The entry's place in `TiresiasOrder.keys`: its lead, then its key (no lead: the key itself)."""
        return self.lead + self.key


_NO_ENTRY = _Entry(1, 0.0, 0.0, 0.0, 0.0)  # (`_demotions`: a job without an entry, skipped as a Q1 one is)


def _demotions(entries: Mapping[str, _Entry], jobs: Mapping[str, JobView], allocations: Mapping[str, Allocation],
               holders: Iterable[str], threshold: float) -> Iterator[float]:
    """`next_change`'s seconds until each Q0 job of `holders` with GPUs crosses `threshold`, in `holders`' order
    (the same operations, so the same floats): C-level passes, where a Python step per holder was ~4% of a
    busy trainmaster decision (its ~2,000 starts are holders the kept crossings do not cover)."""
    ids = list(holders)
    found = list(map(entries.get, ids, repeat(_NO_ENTRY)))  # (no entry: as a Q1 one, skipped)
    q0 = list(map(eq, map(_QUEUE, found), repeat(0)))
    ids, found = list(compress(ids, q0)), list(compress(found, q0))
    views = list(map(jobs.__getitem__, ids))
    gpus = list(map(Allocation.gpus, map(allocations.__getitem__, ids), map(_SPEC, views)))
    attained = map(sub, map(_ATTAINED, compress(views, gpus)), map(_BASE_ATTAINED, compress(found, gpus)))
    return map(truediv, map(sub, repeat(threshold), attained), filter(None, gpus))


def soonest_demotion(entries: Mapping[str, _Entry], jobs: Mapping[str, JobView],
                     allocations: Mapping[str, Allocation], holders: Iterable[str], threshold: float) -> float:
    """The least of `_demotions`, by a Python loop over the holders (the reference; switch `holders_in_c`)."""
    soonest = math.inf
    for jid in holders:
        e = entries.get(jid)
        if e is None or e.queue != 0:
            continue
        job = jobs[jid]
        gpus = allocations[jid].gpus(job.spec)
        if gpus:
            soonest = min(soonest, (threshold - (job.attained - e.base_attained)) / gpus)
    return soonest


class Lead(Protocol):
    """What leads each entry's key in `TiresiasOrder.keys` (`TiresiasOrder.lead`)."""

    def of(self, job: JobView) -> SortKey:
        """The job's lead now (comparable with every other job's; never NaN)."""

    def moved(self, snap: Snapshot) -> Iterable[str]:
        """The live jobs whose lead may have moved without a new view (the journal names those), in `snap`."""


class TiresiasOrder:
    """The order hook: the only state Tiresias keeps between decisions (queue membership).

    Incremental (`incremental`, the default): a decision visits only the jobs whose
    queue can have moved since the previous one -- new or changed jobs (a new
    `JobView`: the controller rebuilds a job's view only when its record changes),
    jobs holding resources (their service grows), and Q1 jobs whose starvation time
    came (`due`: a waiting job's service, runtime and last active time stay as they
    were) -- then sorts every job by its kept key (C-level). A job it does not visit
    is one a full visit would leave as it is.

    `kept_wakes` (with `incremental`): `next_change` reads the waiting Q1 jobs' starvation
    times from `waiting` and the `due` heap instead of recomputing one per waiting job per
    decision (a waiting job's time only moves when it is visited).

    `kept_order`: the entries' keys are kept sorted (`keys`, moved by bisection when a key
    changes: a few per decision), so the order is read off in one pass instead of sorting
    every job's key per decision.

    `lazy_holders` (with `incremental`): a job holding resources with the same view is visited only once
    its service may have crossed the threshold (`safe`: a time before which it cannot have, from its
    service at the last visit and the GPUs it holds: service grows at that rate while the view is the
    same), never for its last active time: the jobs held at the latest decision (`holding`) read it as
    that decision's time (`held_at`), written on the entry when the job leaves `holding`.
    """

    # `follow` (with `incremental`): a full visit looks for new or changed views only among the jobs the
    # snapshot's journal names (`PendingIds.changed`, `joined`), when `views` holds the previous snapshot's
    # (`stamp`: its origin and version), and moves `views` on by them: no pass over every live job, no copy
    # of them. False: compare and copy every live job's view (the reference).
    follow: ClassVar[bool] = True
    # `ranked_line`: keep `line`, the pending jobs in rank order with their gang keys (`cycle.PendingRank`),
    # moved on at each full visit, for every instance (the tests' switch). An instance made with `read` keeps it
    # while `BlockedLine.cut` is on (tiresias' place phase reads it: step 2 of the blocked rest); the others
    # (trainmaster's LAS order) do not: its upkeep (a gang key per job that joins the line, bisections per
    # move) buys nothing without a reader.
    ranked_line: ClassVar[bool] = False

    def __init__(self, threshold: float, starvation: float | None, incremental: bool = True,
                 read: bool = False) -> None:
        self.read = read  # a place phase reads `line` (`cycle.place_in_order`'s `ranked`)
        self.threshold = threshold
        self.starvation = starvation
        self.incremental = incremental  # False: visit every job every decision (the reference)
        self.entries: dict[str, _Entry] = {}
        self.low: set[str] = set()  # the ids of the entries in Q1 (`next_change` looks at those alone)
        self.views: dict[str, JobView] = {}  # the view of each job at its last visit (kept: compared by identity)
        self.due: list[tuple[float, str]] = []  # heap: (starvation time, id) of Q1 jobs holding nothing
        # Q1 jobs not active at their last visit (with some executed time) -> their starvation time, as
        # pushed on `due` then (entries of `due` that disagree are stale). Dropped when a job is held.
        self.waiting: dict[str, float] = {}
        self.kept_wakes = True  # False: `next_change` recomputes every waiting job's time (the reference)
        self.keys: list[SortKey] = []  # every entry's key (led by its `lead`), sorted
        self.kept_order = True  # False: sort the keys every decision (the reference)
        self.partial = False  # True: `snap` holds only some of the live jobs, keep the others' entries
        self.lazy_holders = True  # False: visit every job holding resources every decision (the reference)
        # `next_change` reads the holders' demotion times in C-level passes (`_demotions`); False: a Python loop
        # over them (the reference)
        self.holders_in_c = True
        self.holding: set[str] = set()  # jobs held at `held_at` whose `last_active` is that time (lazy)
        self.held_at = -math.inf
        self.safe: dict[str, float] = {}  # Q0 job held at its last visit -> a time it cannot cross before
        self.crossings: list[tuple[float, str]] = []  # heap of `safe`'s items (entries that disagree: stale)
        self.stamp: tuple[object, int] | None = None  # the snapshot of the last full visit (`follow`)
        # The pending jobs in rank order with their gang keys, moved on with `keys` (`cycle.PendingRank`).
        self.line = PendingRank()
        # `lead` (`las.RemainingOrder`'s): each entry's place in `keys` is led by `lead.of(job)` (`_Entry.lead`: a
        # tuple the order sorts by first, its own key breaking ties), so `keys` is read off as that order: the
        # leads of the journaled jobs and of those `lead.moved` names are worked out again at each full visit
        # (`_relead`). Set by its owner only while the journal serves (`follows`); `led`: every entry has its lead.
        self.lead: Lead | None = None
        self.led = False

    def __call__(self, snap: Snapshot) -> list[JobView]:
        entries = self.entries
        jobs = snap.jobs
        ranked = self.keeps_line
        if not self.partial:
            for jid in entries.keys() - jobs.keys():  # (a C-level difference: few jobs leave at a time)
                self._drop(entries.pop(jid).sort_key)
                if ranked:
                    self.line.drop(jid)
                self.views.pop(jid, None)
                self.low.discard(jid)
                self.waiting.pop(jid, None)
                self.safe.pop(jid, None)
        lazy = self.lazy_holders and self.incremental
        if lazy:
            self._hold(snap)
        visit: Iterable[str] = jobs
        journal: list[str] | None = None
        if self.incremental:
            journal = self._journal(snap) if self.follow and not self.partial else None
            visit = self._changed(snap, lazy, journal)
            if journal is not None:  # (the journaled views alone: every other one is the one kept)
                self.views.update(zip(journal, map(jobs.__getitem__, journal), strict=True))
            else:
                self.views = copy_mapping(jobs) if not self.partial else {**self.views, **jobs}
            if not self.partial:
                pending = snap.pending_ids
                self.stamp = ((pending.origin, pending.version) if isinstance(pending, PendingIds)
                              and pending.changed is not None else None)
        now, visit_one, waiting = snap.now, self._visit, self.waiting
        running, starting = JobState.RUNNING, JobState.STARTING
        for jid in visit:
            job = jobs[jid]
            e = entries.get(jid)
            state = job.state
            if e is not None and e.queue == 1 and (state is running or state is starting):
                if not lazy:
                    e.last_active = now  # all `_visit` does for a Q1 job holding resources (most visits)
                if waiting:
                    waiting.pop(jid, None)
            else:
                visit_one(job, now)
        if ranked:
            if self.partial:
                self.line.stale()
            else:
                self.line.follow(snap, self._rank_key)
        if self.lead is not None:
            self._relead(snap, journal)
        return self.ordered(snap)

    def ordered(self, snap: Snapshot) -> list[JobView]:
        """The snapshot's jobs in the order kept (after a visit of it)."""
        jobs, entries = snap.jobs, self.entries
        if self.kept_order:
            # (After a full visit `views` is a dict copy of `jobs`: read there, not through the snapshot's proxy.)
            read = self.views if self.incremental and not self.partial else jobs
            ids: Iterable[str] = map(_ID, self.keys)
            if len(self.keys) != len(jobs):  # (a partial snapshot: its jobs are some of the entries)
                ids = filter(jobs.__contains__, ids)
            return list(map(read.__getitem__, ids))
        return list(map(jobs.__getitem__, map(_ID, sorted(map(_KEY, map(entries.__getitem__, jobs))))))

    def _rekey(self, e: _Entry, job: JobView, new: bool = False) -> None:
        """`e.rekey`, keeping `keys` sorted."""
        if not new:
            self._drop(e.sort_key)
        elif self.lead is not None and self.led:  # (a new entry takes its lead at once: `keys` stays one kind)
            e.lead = self.lead.of(job)
        e.rekey(job)
        bisect.insort(self.keys, e.sort_key)
        if not new and self.keeps_line:
            self.line.move(job.id, e.key)

    def follows(self, snap: Snapshot) -> bool:
        """Whether a full visit of `snap` follows the journal (`follow`: `_journal` serves) with the order kept
        (`kept_order`): the condition under which `lead` is kept rather than dropped."""
        return (self.follow and self.incremental and self.kept_order and not self.partial
                and self._journal(snap) is not None)

    def _relead(self, snap: Snapshot, journal: list[str] | None) -> None:
        """Move the entries whose lead may have moved: the journaled jobs (a new view) and those `lead.moved`
        names (a new model); every entry where the leads are not kept yet (`led` False) or the journal did
        not serve (the leads then follow every job: the caller keeps `lead` only where it serves)."""
        lead, entries, jobs = self.lead, self.entries, snap.jobs
        assert lead is not None
        if not self.led or journal is None:
            for jid, e in entries.items():
                e.lead = lead.of(jobs[jid])
            self.keys = sorted(map(attrgetter("sort_key"), entries.values()))
            self.led = True
            return
        for jid in chain(journal, lead.moved(snap)):
            e = entries[jid]
            now = lead.of(jobs[jid])
            if now != e.lead:
                self._drop(e.sort_key)
                e.lead = now
                bisect.insort(self.keys, e.sort_key)

    def unlead(self) -> None:
        """Drop `lead`: `keys` back to the entries' own keys (the order's own, Tiresias' LAS order)."""
        if self.lead is None:
            return
        self.lead, self.led = None, False
        for e in self.entries.values():
            e.lead = ()
        self.keys = sorted(map(_KEY, self.entries.values()))

    @property
    def keeps_line(self) -> bool:
        """Whether `line` is kept (`ranked_line`, or `read` with `BlockedLine.cut`)."""
        return self.ranked_line or (self.read and BlockedLine.cut)

    def _rank_key(self, jid: str) -> tuple[int, float, float, str]:
        return self.entries[jid].key

    def _drop(self, key: SortKey) -> None:
        keys = self.keys
        del keys[bisect.bisect_left(keys, key)]

    def _journal(self, snap: Snapshot) -> list[str] | None:
        """`follow`: the live jobs whose view may differ from the one kept, by the snapshot's journal, where
        `views` holds the previous snapshot's (a full visit of it); else None."""
        pending = snap.pending_ids
        if (not isinstance(pending, PendingIds) or pending.changed is None or self.stamp is None
                or self.stamp != (pending.origin, pending.version - 1)):
            return None
        return list(filter(snap.jobs.__contains__, pending.changed | pending.joined))

    def _changed(self, snap: Snapshot, lazy: bool, journal: list[str] | None = None) -> set[str]:
        """The jobs whose queue may have moved since the last visit (class doc); `journal`: the only jobs whose
        view may have changed (`follow`)."""
        jobs, views = snap.jobs, self.views
        if journal is not None:  # new or changed, among the journaled jobs
            visit = set(compress(journal, map(is_not, map(jobs.__getitem__, journal), map(views.get, journal))))
        else:
            visit = set(compress(jobs, map(is_not, jobs.values(), map(views.get, jobs))))  # new or changed
        held = snap.held if snap.held is not None else {j.id: j.allocation for j in jobs.values() if j.active}
        if not lazy:
            visit.update(held.keys() & jobs.keys())
        elif not self.partial:  # (a partial snapshot holds no held job: they wait for a full one)
            crossings, safe = self.crossings, self.safe
            while crossings and crossings[0][0] <= snap.now:
                at, jid = heapq.heappop(crossings)
                if safe.get(jid) == at:
                    del safe[jid]
                    if jid in held and jid in jobs:
                        visit.add(jid)
            if len(crossings) > 2 * len(safe) + 64:  # (stale entries: a changed view pushes a new one)
                self.crossings = [(at, jid) for jid, at in safe.items()]
                heapq.heapify(self.crossings)
        due = self.due
        limit = snap.now + 1e-9 * (abs(snap.now) + 1.0)  # (the exact test is `_visit`'s)
        while due and due[0][0] <= limit:
            jid = heapq.heappop(due)[1]
            if jid in jobs:
                visit.add(jid)
            else:  # (not visited now: its time is recomputed until it is)
                self.waiting.pop(jid, None)
        return visit

    def _keep_safe(self, job: JobView, now: float, over: float) -> None:
        """Keep when the held Q0 `job` may cross the threshold (`over` < 0 now): its service grows by its GPUs
        per second while its view is the same. Early by a margin far above rounding (a visit then is exact)."""
        gpus = job.gpus
        if not gpus:  # (no GPUs: its service does not grow)
            at = math.inf
        else:
            at = now - over / gpus
            at -= 1e-6 * (abs(at) + 1.0)
        self.safe[job.id] = at
        heapq.heappush(self.crossings, (at, job.id))

    def _hold(self, snap: Snapshot) -> None:
        """`lazy_holders`: the jobs held now read `last_active` as now; those that left `holding` get the time
        of the decision that last held them written on their entries."""
        now = snap.now
        held = snap.held if snap.held is not None else {j.id: j.allocation for j in snap.jobs.values() if j.active}
        entries, waiting = self.entries, self.waiting
        for jid in self.holding - held.keys():
            e = entries.get(jid)
            if e is not None:
                e.last_active = self.held_at
        if waiting:  # (a job that starts holding leaves `waiting`; nothing puts it back while it holds)
            for jid in held.keys() - self.holding:
                waiting.pop(jid, None)
        self.holding = set(held)
        self.held_at = now

    def _visit(self, job: JobView, now: float) -> None:
        entries = self.entries
        e = entries.get(job.id)
        if e is None:
            e = entries[job.id] = _Entry(0, job.submit_time, 0.0, 0.0, job.submit_time)
            self._rekey(e, job, new=True)
        active = job.active
        if active:
            e.last_active = now
        if e.queue == 0:
            over = job.attained - e.base_attained - self.threshold
            if over < 0 and active and self.lazy_holders and self.incremental:
                self._keep_safe(job, now, over)
            elif self.safe:
                self.safe.pop(job.id, None)
            if over >= 0:
                # Crossed the threshold: FIFO in Q1 by when it crossed, not by when we noticed.
                gpus = job.gpus if active else 0
                e.queue, e.entered = 1, now - over / gpus if gpus else now
                self._rekey(e, job)
                self.low.add(job.id)
        elif self.starvation is not None and job.pending:
            executed = job.runtime - e.base_runtime
            if executed > 0 and now - e.last_active >= self.starvation * executed:
                e.queue, e.entered = 0, now
                e.base_attained, e.base_runtime = job.attained, job.runtime
                self._rekey(e, job)
                self.low.discard(job.id)
        if e.queue == 1 and not active and self.starvation is not None and self.incremental:
            executed = job.runtime - e.base_runtime
            if executed > 0:
                at = self.waiting[job.id] = e.last_active + self.starvation * executed
                heapq.heappush(self.due, (at, job.id))
                return
        if self.waiting:
            self.waiting.pop(job.id, None)

    def next_change(self, snap: Snapshot, plan: Plan) -> float | None:
        """Seconds until the order can next change without an event: a demotion or a starvation promotion.

        None when every job runs: nobody could take a demoted job's place, and
        the next event's decision dates a demotion back to its crossing time anyway.
        """
        if len(plan.allocations) >= len(snap.jobs):
            return None
        soonest = math.inf
        entries, jobs, allocations, threshold = self.entries, snap.jobs, plan.allocations, self.threshold
        # Only Q0 holders can be demoted: skip the Q1 ones (`low`, often most of them) in one C-level pass
        # (a minimum: any order gives the same value).
        holders = allocations.keys() - self.low if self.low else allocations.keys()
        if self.safe and self.lazy_holders and self.incremental:  # the kept ones: a few from `crossings`
            tracked = self._kept_holders(snap, plan, holders)
            holders = (holders - tracked) | set(self._first_crossings(tracked))
        if self.holders_in_c:
            soonest = min(chain((soonest,), _demotions(entries, jobs, allocations, holders, threshold)))
        else:
            soonest = min(soonest, soonest_demotion(entries, jobs, allocations, holders, threshold))
        if self.starvation is not None:
            entries = self.entries
            out = self.low - plan.allocations.keys()  # (Q1 entries only; any order: a minimum)
            kept = self.kept_wakes and self.incremental
            for jid in out - self.waiting.keys() if kept else out:
                e = entries[jid]
                executed = snap.jobs[jid].runtime - e.base_runtime
                if executed > 0:
                    last = self.held_at if jid in self.holding else e.last_active  # (`lazy_holders`)
                    soonest = min(soonest, last + self.starvation * executed - snap.now)
            if kept:
                soonest = min(soonest, self._soonest_waiting(plan) - snap.now)
        return None if math.isinf(soonest) else soonest

    def _kept_holders(self, snap: Snapshot, plan: Plan, holders: Iterable[str]) -> set[str]:
        """The Q0 jobs of `holders` whose `safe` time still holds for the plan (C-level passes): their view is
        the one last visited and the plan keeps the allocation they hold (so they gain service at its rate)."""
        jobs, views, allocations = snap.jobs, self.views, plan.allocations
        kept = list(self.safe.keys() & holders)
        if not kept:
            return set()
        same = map(is_, map(jobs.get, kept), map(views.get, kept))
        ids = list(compress(kept, same))
        same = map(is_, map(allocations.__getitem__, ids), map(_ALLOCATION, map(jobs.__getitem__, ids)))
        return set(compress(ids, same))

    def _first_crossings(self, kept: set[str]) -> list[str]:
        """The jobs of `kept` whose demotion may come first: those with the earliest `safe` times (within a
        margin far above the times' own, so the exact minimum is among them), read off `crossings`."""
        crossings, safe = self.crossings, self.safe
        popped: list[tuple[float, str]] = []
        first: list[str] = []
        limit = math.inf
        while crossings:
            at, jid = crossings[0]
            if safe.get(jid) != at:
                heapq.heappop(crossings)  # (stale)
                continue
            if at > limit or math.isinf(at):  # (inf: no GPUs, never demoted while held)
                break
            popped.append(heapq.heappop(crossings))
            if jid in kept:
                if not first:
                    limit = at + 1e-5 * (abs(at) + 1.0)
                first.append(jid)
        for item in popped:
            heapq.heappush(crossings, item)
        return first

    def _soonest_waiting(self, plan: Plan) -> float:
        """The earliest starvation time among `waiting` jobs the plan leaves out (inf: none), from the
        top of `due`: stale entries there are dropped (no visit needs them), those of jobs the plan
        starts are put back."""
        due, waiting, allocations = self.due, self.waiting, plan.allocations
        starting: list[tuple[float, str]] = []
        soonest = math.inf
        while due:
            at, jid = due[0]
            if waiting.get(jid) != at:
                heapq.heappop(due)
            elif jid in allocations:
                starting.append(heapq.heappop(due))
            else:
                soonest = at
                break
        for item in starting:
            heapq.heappush(due, item)
        return soonest

    def touch(self, snap: Snapshot) -> None:
        """Note the jobs holding resources now (what a full pass of `__call__` would do for them)."""
        if self.lazy_holders and self.incremental:
            self._hold(snap)
            return
        held = snap.held if snap.held is not None else {j.id: j.allocation for j in snap.jobs.values() if j.active}
        waiting = self.waiting
        for jid in held:
            entry = self.entries.get(jid)
            if entry is not None:
                entry.last_active = snap.now
                if waiting:
                    waiting.pop(jid, None)

    def queue_of(self, job_id: str) -> int | None:
        entry = self.entries.get(job_id)
        return None if entry is None else entry.queue


class Tiresias(Cycle):
    """The cycle, plus a wake-up time: each plan's `wake_after` is the next demotion or promotion.

    Between events the order only changes when a running Q0 job crosses the
    threshold or a Q1 job starves, and that matters only while some job waits.
    So instead of deciding every `tick` seconds the policy asks to be woken
    then (never sooner than `tick`: decisions stay as coarse as a periodic
    scheduler's), and not at all when nothing can change (`interval` is None).
    """

    # True: when the first pending job's minimum alone does not fit in the free capacity, the pending pass
    # gives up without summing every pending job's (on a busy cluster most decisions; False: the reference).
    first_misfit: ClassVar[bool] = True
    # With `first_misfit`: the pending pass also gives up when the first `misfit_prefix` pending jobs' minimums
    # together do not fit (a long line on a busy cluster: its first job often fits alone, the sum of every
    # pending job's minimum never does, and `PendingDemand.of` reads every pending id). 0: the first job alone.
    misfit_prefix: ClassVar[int] = 16

    def __init__(self, threshold: float, starvation: float | None, tick: float) -> None:
        self.ranks = TiresiasOrder(threshold, starvation, read=True)  # the queues: the state kept between decisions
        # (Pending jobs ask their minimum, `KeptSizes`: the place phase may leave the blocked rest to `line`.)
        super().__init__(name="tiresias", order=self.ranks, size=KeptSizes(journal=True),
                         place=place_in_order(strict=False, ranked=self.ranks.line), after=(preempt_lower,))
        self.tick = tick
        self.demand = PendingDemand()  # the pending jobs' minimums in all, kept across decisions

    def decide(self, snap: Snapshot) -> Plan:
        pending = snap.pending_ids if snap.pending_ids is not None else [
            jid for jid, j in snap.jobs.items() if j.pending]
        if not pending:  # nobody to place or to preempt for: everything keeps running as it is
            self.ranks.touch(snap)
            return Plan(allocations={jid: j.allocation for jid, j in snap.jobs.items() if j.active})
        plan = self._pending_pass(snap, pending) or super().decide(snap)
        wait = self.ranks.next_change(snap, plan)
        return replace(plan, wake_after=None if wait is None else max(self.tick, wait))

    def _prefix_fits(self, snap: Snapshot, pending: Sequence[str], free: Resources) -> bool:
        """Whether the first pending job's minimum fits in `free`, and the first `misfit_prefix` ones' together."""
        jobs = snap.jobs
        first = jobs[pending[0]].spec.min_resources
        if not first.fits_in(free):
            return False
        if self.misfit_prefix <= 1 or len(pending) <= 1:
            return True
        needs = list(map(_MIN, map(_SPEC, map(jobs.__getitem__, pending[1:self.misfit_prefix]))))
        return Resources(first.cpu + sum(map(_CPU, needs)), first.memory + sum(map(_MEMORY, needs)),
                         first.gpu + sum(map(_GPU, needs))).fits_in(free)

    def _pending_pass(self, snap: Snapshot, pending: Sequence[str]) -> Plan | None:
        """Decide on the pending jobs alone; None when one of them does not fit.

        When every pending job fits in the free capacity, nobody is preempted
        and running jobs keep their places, so the plan is the one a full pass
        would make, for the cost of the pending jobs only. Otherwise preemption
        needs every job's rank: the caller decides on everything.
        """
        free = snap.free_total if snap.free_total is not None else sum(snap.free.values(), start=Resources())
        if self.first_misfit and not self._prefix_fits(snap, pending, free):
            return None  # (the sum below is at least these jobs' minimums: resources are never negative)
        demand = self.demand.of(snap, pending)
        if not demand.fits_in(free):
            return None
        self.ranks.partial = True
        try:
            plan = self.run(snap, pending_only=True, after=())
        finally:
            self.ranks.partial = False
        if any(jid not in plan.allocations and jid not in plan.rejected for jid in pending):
            return None
        self.ranks.touch(snap)
        return plan


def make(threshold: float = THRESHOLD, starvation: float | None = STARVATION, interval: float = INTERVAL) -> Tiresias:
    return Tiresias(threshold, starvation, interval)
