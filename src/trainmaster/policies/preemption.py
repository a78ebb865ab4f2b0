"""Phase 5: preemption, one implementation with pluggable victim rules.

Blocked claimants are served in the rule's order. A claimant first tries to
place its sized gang as things stand (`try_first`), then evicts the rule's
candidates one at a time, in the rule's eviction order, until its gang fits.
Evictions happen in a workspace trial: when even every candidate would not
make room, all of it is undone and nobody is evicted. Victims the claimant
turned out not to need go back where they were (`put_back`); the others wait
(`priority`, or `quota` when reclaimed). With `migrate`, the victims still out
once every claimant is served are placed again wherever they fit.

Two rules, in the stated order of who may be evicted:

- `LowerRank` (tiresias, srtf): jobs ranked after the claimant in the cycle's
  order, lowest ranked first; victims then migrate where they still fit.
- `QueueRules` (edl, trainmaster): a service may evict any training job;
  otherwise, once a victim ran `min_runtime` seconds, priority (a lower-priority
  job of the claimant's queue), then reclaim (a job of another queue running
  on borrowed capacity, its queue staying at or above its quota, when the
  claimant's queue is within its own quota). Candidates go in order of least
  work lost since their last checkpoint (GPU-seconds, counting periodic
  checkpoints), then lowest priority, then latest started. Unneeded victims are
  put back. The claimant is tried only once a first victim is out, as before the
  two preemptions were merged (kept so plans stay the same; note that a job
  waiting behind the head that fits as is still starts when it has an evictable
  candidate, which then goes back: bench/results/policy-core.md).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from bisect import bisect_right
from collections.abc import Callable, Iterator, Mapping
from itertools import compress, count, islice, repeat
from operator import attrgetter, getitem, is_, itemgetter, le, not_, or_
from typing import cast

from trainmaster.core.allocation import Allocation
from trainmaster.core.job import JobKind, Role
from trainmaster.core.resources import Resources, resources_of
from trainmaster.policies.cycle import AfterHook, GangKey, gang_key
from trainmaster.policies.queues import try_place
from trainmaster.policies.snapshot import JobView, Snapshot
from trainmaster.policies.waits import WaitKind
from trainmaster.policies.workspace import Workspace, demand

MIN_RUNTIME = 600.0

_ID = attrgetter("id")
_SPEC, _PRIORITY = attrgetter("spec"), attrgetter("priority")
_CPU, _MEMORY, _GPU = attrgetter("cpu"), attrgetter("memory"), attrgetter("gpu")
_KIND, _PRIORITY_OF = attrgetter("spec.kind"), attrgetter("spec.priority")  # of a view
_WANT, _GANG = itemgetter(0), itemgetter(1)  # of a `Workspace.gangs` entry
_VICTIM = itemgetter(0)  # of an `_evict_for` entry (a C-level read: no comprehension frame per start)
_NO_GANG: tuple[object, None] = (object(), None)  # (no `want` is this object)
SERVICE, PRIORITY, RECLAIM, RANK = "service", "priority", "reclaim", "rank"  # how a victim may be evicted


def since_checkpoint(job: JobView, now: float) -> float:
    """Seconds of work a stop now would lose: since the last checkpoint, periodic ones included."""
    if not job.active or job.running_since is None:
        return 0.0
    base = max(job.last_checkpoint or job.running_since, job.running_since)
    elapsed = max(0.0, now - base)
    every = job.spec.checkpoint_every
    return elapsed % every if every > 0 else elapsed


def work_lost(job: JobView, now: float) -> float:
    """GPU-seconds (task-seconds for CPU jobs) lost if `job` is stopped now."""
    size = job.gpus or len(job.allocation)
    return size * since_checkpoint(job, now)


def _victim_kind(claimant: JobView, victim: JobView, ws: Workspace, min_runtime: float,
                 quota_blocked: bool, held: Allocation) -> str | None:
    """How `claimant` may evict `victim` ("service", "priority", "reclaim"), or None."""
    if victim.id == claimant.id or victim.spec.kind is JobKind.SERVICE:
        return None
    if claimant.spec.kind is JobKind.SERVICE:
        return SERVICE
    snap = ws.snap
    started_now = not victim.active  # placed in this very decision: taking it back costs nothing
    if not started_now and (victim.running_since is None or snap.now - victim.running_since < min_runtime):
        return None
    same_queue = ws.queue_of(victim) == ws.queue_of(claimant)
    if same_queue and victim.spec.priority < claimant.spec.priority:
        return PRIORITY
    if (not quota_blocked and not same_queue and ws.book.within_quota(claimant, claimant.spec.min_resources)
            and ws.book.lendable(victim, held.resources(victim.spec))):
        return RECLAIM
    return None


class _Holders:
    """The jobs holding resources, indexed by queue and priority, so each claimant scans only possible victims.

    A superset filter in front of `_victim_kind`: a non-service claimant can
    evict only lower-priority jobs of its own queue, or (reclaim) jobs of other
    queues; a service, any of them. Kept in step with `ws.allocations` by `sync`.
    """

    def __init__(self, snap: Snapshot, ws: Workspace, indexed: bool = True) -> None:
        self.snap, self.ws = snap, ws
        self.indexed = indexed  # False: scan every holder (the reference the index must plan like)
        self.index: dict[str, dict[int, dict[str, None]]] = {}
        self.where: dict[str, tuple[str, int]] = {}
        self.version = 0  # bumped at every change to the index (`any` remembers answers per version)
        self._any: dict[tuple[int, str, bool, int], bool] = {}
        for jid, alloc in ws.allocations.items():
            if alloc and jid in snap.jobs:
                self._add(jid)

    def _add(self, jid: str) -> None:
        job = self.snap.jobs[jid]
        key = self.where[jid] = (self.ws.queue_of(job), job.spec.priority)
        self.index.setdefault(key[0], {}).setdefault(key[1], {})[jid] = None
        self.version += 1

    def sync(self, *jids: str) -> None:
        """Re-index `jids` after their allocations changed."""
        for jid in jids:
            holds = bool(self.ws.allocations.get(jid)) and jid in self.snap.jobs
            key = self.where.get(jid)
            if key is not None and not holds:
                del self.index[key[0]][key[1]][jid]
                del self.where[jid]
                self.version += 1
            elif key is None and holds:
                self._add(jid)

    def candidates(self, claimant: JobView, quota_blocked: bool) -> list[str]:
        """Every holder `_victim_kind` might accept for `claimant` (maybe more, never fewer)."""
        if not self.indexed:
            return [jid for jid, alloc in self.ws.allocations.items() if alloc and jid in self.snap.jobs]
        out: list[str] = []
        for jids in self._groups(claimant, quota_blocked):
            out.extend(jids)
        return out

    def any(self, claimant: JobView, quota_blocked: bool) -> bool:
        """Whether `candidates` would name anybody (without listing them: most claimants have nobody)."""
        if not self.indexed:
            return any(alloc and jid in self.snap.jobs for jid, alloc in self.ws.allocations.items())
        index, mine = self.index, self.ws.queue_of(claimant)
        if len(index) > 1 or (index and mine not in index):  # another queue's holders: reclaim may count
            return any(self._groups(claimant, quota_blocked))
        # Only the claimant's queue holds anything: the answer follows its kind and priority alone.
        key = (self.version, mine, claimant.spec.kind is JobKind.SERVICE, claimant.spec.priority)
        found = self._any.get(key)
        if found is None:
            found = self._any[key] = any(self._groups(claimant, quota_blocked))
        return found

    def _groups(self, claimant: JobView, quota_blocked: bool) -> Iterator[dict[str, None]]:
        """`candidates`, a group of the index at a time (the reclaim test only once another queue is met)."""
        mine = self.ws.queue_of(claimant)
        service = claimant.spec.kind is JobKind.SERVICE
        reclaim: bool | None = None
        for queue, by_priority in self.index.items():
            if queue == mine:
                for priority, jids in by_priority.items():
                    if service or priority < claimant.spec.priority:
                        yield jids
                continue
            if reclaim is None:
                reclaim = (not service and not quota_blocked
                           and self.ws.book.within_quota(claimant, claimant.spec.min_resources))
            if service or reclaim:
                yield from by_priority.values()


class VictimRule(ABC):
    """Who a claimant may evict, in which order; the knobs of the one preemption (module doc)."""

    try_first = True  # try the claimant before evicting anybody
    put_back = False  # put back victims the claimant did not need, right after it is placed
    migrate = False  # place the victims still out again, wherever they fit, after every claimant
    quota_aware = False  # place claimants within hard quotas (`queues.try_place`)
    # True: what a later claimant could free for itself is never more, node by node, than what an earlier
    # one could (`LowerRank`), so a one-role gang that could not start is not tried again (`cycle.gang_key`).
    monotone = False
    shortcuts = True  # False: every claimant is tried in full (the reference the shortcuts must plan like)
    # Once `exhausted`: the claimants whose gang is lost or did not fit as things stand are left blocked a run
    # at a time, found by C-level passes over their keys (`_skippable`), instead of a Python step each (a long
    # line on a busy cluster: thousands per decision). False: a step per claimant (the reference).
    skip_runs = True
    # (Fewer claimants left: a step each costs less than the passes' set-up. Only where the claimants were keyed
    # beforehand -- the place phase's line, `Workspace.gangs`, or a hook's kept keys (`preempt_with`'s `given`):
    # keying thousands afresh at once keeps as many new tuples alive, and the collector's passes they bring
    # cost trainmaster's busy decision more than the steps spared.)
    skip_runs_from = 128
    # A claimant whose need (`demand`, asked where `room` is known) exceeds the free total is not placed as is
    # before its first eviction: that placement fails at its first test, changing nothing (`_evict_for`; not
    # under queue definitions with a quota-aware rule, whose placement may ask the book first). False: it is
    # tried (the reference).
    lean_misfit = True

    def claimants(self, blocked: list[JobView]) -> list[JobView]:
        return blocked

    def idle(self, claimants: list[JobView]) -> bool:
        """True when no claimant can be served: none is tried as is (`try_first` off), nobody may be evicted
        for any of them and `settled` changes nothing for them; the pass then leaves them all blocked at once."""
        return False

    def room(self, claimant: JobView) -> Resources | None:
        """At most what evicting every candidate frees (None: unknown); checked before any eviction."""
        return None

    def exhausted(self, claimant: JobView) -> bool:
        """True when `room` is zero for this claimant and every later one (it only shrinks along the order)
        and `settled` for one not placed changes nothing a later claimant's room or candidates read."""
        return False

    @abstractmethod
    def candidates(self, claimant: JobView) -> Iterator[tuple[JobView, str]]:
        """Victims in eviction order with how each may be evicted, each checked when it is reached."""

    def settled(self, claimant: JobView, evicted: list[JobView], placed: bool) -> None:
        """The claimant is served (or not); `evicted` were taken out for it (put back, if unneeded, by now)."""
        return  # by default a rule keeps no state across claimants


class LowerRank(VictimRule):
    """Jobs ranked after the claimant, lowest ranked first. One pass over the holders for all claimants:
    claimants come in rank order, so what is held below the current one only shrinks.

    `lazy_sums`: what each holder holds (an `Allocation.resources` call each) is read only for the holders
    ranked after the first claimant whose room is asked (those ahead of it are never candidates nor summed:
    often most of them, the running jobs ranked ahead of the waiting ones), when that first room is asked:
    nothing has changed in the workspace before (integer sums: the same room as the total less those ahead).
    False: every holder's, at set-up (the reference).

    `bisect_room`: the holders ranked ahead of a claimant are found by bisection over `holders` (sorted by
    rank, the set-up's own key) instead of a Python step per holder passed (~100-170 of ~190 at the first
    claimant on Philly 80x8).

    `ranked_holders`: the holders are the ranked jobs that hold something, taken in the rank's own order
    (`Cycle.run` builds it in rank order, so the sort by rank is one linear pass over a sorted run) instead of
    a sort of the allocations' order (a full sort, and a set intersection to tell that every holder is ranked).
    """

    migrate = True
    monotone = True  # what holders ranked after the claimant and the free capacity add up to only shrinks
    lazy_sums = True
    bisect_room = True  # False: `room` steps past the holders ranked ahead one at a time (the reference)
    ranked_holders = True  # False: sort the holders in the allocations' order (the reference)

    def __init__(self, ws: Workspace) -> None:
        self.ws = ws
        rank = ws.rank
        self.last = len(rank)
        allocations = ws.allocations
        # Victims come off the end. (C-level key when every holder is ranked, as in a full pass.)
        if self.ranked_holders:
            ahead = sorted(filter(allocations.__contains__, rank), key=rank.__getitem__)  # (nearly sorted)
            ranked = len(ahead) == len(allocations)
        else:
            ranked = len(rank.keys() & allocations.keys()) == len(allocations)
        self._key: Callable[[str], int] = rank.__getitem__ if ranked else self._rank
        self.holders = ahead if self.ranked_holders and ranked else sorted(allocations, key=self._key)
        self.held: dict[str, Resources] = {}  # what holders[summed:] hold
        self.below = Resources()  # held by holders[cursor:end], once summed
        self.summed: int | None = None  # from which holder `held` and `below` were read (None: not yet)
        self.cursor, self.end, self.k = 0, len(self.holders), len(self.holders)
        if not self.lazy_sums:
            self._sum(0)

    def _sum(self, start: int) -> None:
        """Read what holders[start:] hold (the workspace as at set-up) into `held` and `below`."""
        jobs, allocations = self.ws.snap.jobs, self.ws.allocations
        ids = self.holders[start:]
        held = list(map(Allocation.resources, map(allocations.__getitem__, ids),
                        map(_SPEC, map(jobs.__getitem__, ids))))
        self.held = dict(zip(ids, held, strict=True))
        self.below = resources_of(sum(map(_CPU, held)), sum(map(_MEMORY, held)), sum(map(_GPU, held)))
        self.summed = self.cursor = start

    def _rank(self, jid: str) -> int:
        return self.ws.rank.get(jid, self.last)

    def claimants(self, blocked: list[JobView]) -> list[JobView]:
        line = self.ws.blocked_line
        if line is not None and line[0] is blocked:  # (the place phase's own list: in rank order already)
            return blocked
        ranks = list(map(self.ws.rank.get, map(_ID, blocked), repeat(self.last)))
        if all(map(le, ranks, islice(ranks, 1, None))):  # (the place phase blocks them in rank order)
            return blocked
        return sorted(blocked, key=lambda j: self._rank(j.id))

    def exhausted(self, claimant: JobView) -> bool:
        below = self.room(claimant)  # held by holders ranked after it: only shrinks along the claimants
        return below is not None and below.is_zero()

    def room(self, claimant: JobView) -> Resources | None:
        mine = self.ws.rank.get(claimant.id, self.last)  # (`_rank`, inlined: a frame per claimant)
        cursor, end, holders = self.cursor, self.end, self.holders
        if self.bisect_room:  # (holders are sorted by this very rank: the first one ranked after the claimant)
            # Where the holder at `cursor` is ranked after the claimant, the bisection's answer is `cursor` (the
            # range is sorted): a long line's claimants mostly sit between the same two holders.
            if cursor >= end or self._key(holders[cursor]) <= mine:
                cursor = bisect_right(holders, mine, cursor, end, key=self._key)
        else:
            rank, last = self.ws.rank, self.last
            while cursor < end and rank.get(holders[cursor], last) <= mine:
                cursor += 1
        if self.summed is None:  # (`lazy_sums`: the first room asked, nothing changed since set-up)
            self._sum(cursor)
        elif cursor > self.cursor:
            passed = list(map(self.held.__getitem__, islice(holders, self.cursor, cursor)))
            below = self.below
            self.below = resources_of(below.cpu - sum(map(_CPU, passed)), below.memory - sum(map(_MEMORY, passed)),
                                      below.gpu - sum(map(_GPU, passed)))
            self.cursor = cursor
        return self.below

    def candidates(self, claimant: JobView) -> Iterator[tuple[JobView, str]]:
        self.k = self.end
        while self.k > self.cursor:
            self.k -= 1
            yield self.ws.snap.jobs[self.holders[self.k]], RANK

    def settled(self, claimant: JobView, evicted: list[JobView], placed: bool) -> None:
        if placed and evicted:  # every victim stays out (`put_back` is off): drop them off the end
            self.end = self.k
            for victim in evicted:
                self.below = self.below - self.held[victim.id]


class QueueRules(VictimRule):
    """Services, then priority within a queue, then reclaim of borrowed quota; least work lost first.

    `quick_idle`: `idle` first asks, in C-level passes, whether no claimant is a service and none has a
    higher priority than the lowest-priority job with an entry in the workspace's allocations (a superset of
    the holders): then nobody may evict anybody and the holders' index (a Python step per holder, 8% of a
    trainmaster decision on Philly's 80x8 line, where every decision is idle) is never built. The index is
    built on first use, before the workspace changes (`idle`, else the first claimant's `room`). False: the
    index at set-up and `idle` asking it (the reference).
    """

    try_first = False
    put_back = True
    quota_aware = True
    quick_idle = True

    def __init__(self, ws: Workspace, min_runtime: float, indexed: bool) -> None:
        self.ws, self.min_runtime, self.indexed = ws, min_runtime, indexed
        self._holders = None if self.quick_idle else _Holders(ws.snap, ws, indexed)

    @property
    def holders(self) -> _Holders:
        if self._holders is None:
            self._holders = _Holders(self.ws.snap, self.ws, self.indexed)
        return self._holders

    def idle(self, claimants: list[JobView]) -> bool:
        """Without queue definitions nobody may reclaim, and whom a claimant may evict follows its kind and
        priority alone (`_Holders.any`): one test per distinct (kind, priority) among the claimants.

        The quick test reads whether a claimant is a service and the top priority alone (no class keyed);
        the classes, where it cannot say, are keyed by (a service?, priority): a bool and an int hash in C,
        where a `JobKind` in the key hashed through `Enum.__hash__`, a Python frame per claimant."""
        if self.ws.queued:  # (reclaim follows each claimant's queue and quota: tested per claimant)
            return False
        if self.quick_idle and self._holders is None:
            service = JobKind.SERVICE in map(_KIND, claimants)  # (an identity match first: in C)
            if self._nobody_lower(service, max(map(_PRIORITY_OF, claimants), default=None)):
                return True
        services = map(is_, map(_KIND, claimants), repeat(JobKind.SERVICE))
        classes = zip(services, map(_PRIORITY_OF, claimants), strict=True)
        one_each = dict(zip(classes, claimants, strict=True))  # (the last claimant of each class)
        return not any(self.holders.any(claimant, False) for claimant in one_each.values())

    def _nobody_lower(self, service: bool, top: int | None) -> bool:
        """No claimant is a service and none is above every job the workspace holds an entry for (`top`: the
        claimants' highest priority; None: there is no claimant)."""
        if top is None or service:
            return top is None
        snap = self.ws.snap
        priorities = list(map(_PRIORITY, map(_SPEC, filter(None, map(snap.jobs.get, self.ws.allocations)))))
        return not priorities or top <= min(priorities)

    def room(self, claimant: JobView) -> Resources | None:
        """Nothing when no holder may be evicted for the claimant (it then cannot start); else unknown."""
        quota_blocked = self.ws.kind(claimant.id) is WaitKind.QUOTA
        return None if self.holders.any(claimant, quota_blocked) else Resources()

    def candidates(self, claimant: JobView) -> Iterator[tuple[JobView, str]]:
        ws, snap = self.ws, self.ws.snap
        quota_blocked = ws.kind(claimant.id) is WaitKind.QUOTA
        running = []
        for jid in self.holders.candidates(claimant, quota_blocked):
            a = ws.allocations.get(jid)
            if a and _victim_kind(claimant, snap.jobs[jid], ws, self.min_runtime, quota_blocked, a):
                running.append(snap.jobs[jid])
        running.sort(key=lambda v: (work_lost(v, snap.now), v.spec.priority, -(v.running_since or snap.now), v.id))
        for victim in running:
            held = ws.allocations.get(victim.id)
            if not held:
                continue
            kind = _victim_kind(claimant, victim, ws, self.min_runtime, quota_blocked, held)  # usage moved
            if kind:
                yield victim, kind

    def settled(self, claimant: JobView, evicted: list[JobView], placed: bool) -> None:
        if evicted:
            self.holders.sync(claimant.id, *[v.id for v in evicted])
        else:  # (most claimants: nobody to evict)
            self.holders.sync(claimant.id)


def _place(rule: VictimRule, ws: Workspace, job: JobView, want: Mapping[Role, int],
           need: Resources | None = None) -> bool:
    """Place `job`'s gang of `want` as things stand now; `need`: its `demand`, where known."""
    # (Without queue definitions, for a job holding nothing here and running nowhere, `try_place` is `ws.start`:
    # called straight, a frame per claimant placed spared; an entry here, even an empty one, goes through it.)
    if rule.quota_aware and (ws.queued or job.allocation.tasks or job.id in ws.allocations):
        result = try_place(ws, job, want, need)
        return result is not None and not isinstance(result, str)
    return ws.start(job, want, need) is not None


def _evict_for(rule: VictimRule, ws: Workspace, claimant: JobView, key: GangKey | None,
               misfits: dict[GangKey, Resources]) -> list[tuple[JobView, Allocation, str]] | None:
    """Serve one claimant: the victims it evicted (empty: it fit as is), or None when it cannot start.

    `key`: the claimant's `gang_key` where its placement depends on free capacity alone (else None);
    `misfits`: such gangs that did not fit as things stood, with the free total then (the same object:
    nothing moved since), so a claimant with nobody to evict is not searched for again.
    """
    want = ws.want.get(claimant.id)
    if want is None or claimant.id in ws.allocations or claimant.id in ws.rejected:
        return None
    room = rule.room(claimant)
    misfit = key is not None and misfits.get(key) is ws.total_free
    if (rule.shortcuts and room is not None and not (room.gpu or room.cpu or room.memory)  # (`is_zero`, inlined)
            and (misfit or not rule.try_first)):
        # Nobody to evict: it starts as is (known not to fit) or not at all.
        rule.settled(claimant, [], False)
        return None
    need = None
    if room is not None:  # (what it needs, asked once: `find` is given it)
        need, free = demand(claimant.spec, want), ws.total_free
        # (`fits_in(free + room)`, inlined: no sum built; with `find`'s inlined test, calling both cost ~2% of a
        # busy trainmaster decision, 11.5 M instructions of 570 M, rep21)
        if not (need.gpu <= free.gpu + room.gpu and need.cpu <= free.cpu + room.cpu
                and need.memory <= free.memory + room.memory):
            if key is not None:  # (so it does not fit as is either)
                misfits[key] = free
            return None
    # A placement as is changes nothing when it fails (`find`, then `assign`; `try_place` without queue
    # definitions alike: no quota problem after a fit): the trial opens after it (`try_place` under queue
    # definitions may: then before). Kept as is, it is recorded where the trial would put it.
    trial = ws.trial() if rule.quota_aware and ws.queued else None
    # Without that trial, a need beyond the free total fails as is at the placement's first test (`find`'s,
    # `try_place`'s: the claimant holds nothing here), with nothing changed: not tried (`lean_misfit`).
    placed = (rule.try_first and not misfit
              and (need is None or trial is not None or not rule.lean_misfit
                   or need.fits_in(free))  # (once per claimant: the one copy of the test)
              and _place(rule, ws, claimant, want, need))
    if placed and trial is None:
        return []
    if rule.try_first and not placed and key is not None:
        misfits[key] = ws.total_free
    if trial is None:
        trial = ws.trial()
    evicted: list[tuple[JobView, Allocation, str]] = []
    if not placed:
        for victim, kind in rule.candidates(claimant):
            held = ws.release(victim)
            assert held is not None
            evicted.append((victim, held, kind))
            if _place(rule, ws, claimant, want, need):
                placed = True
                break
    if not placed:
        trial.discard()
        rule.settled(claimant, list(map(_VICTIM, evicted)), False)
        return None
    trial.commit()
    return evicted


def _victim_waits(ws: Workspace, claimant: JobView, kind: str, victim: JobView) -> None:
    if kind == RECLAIM:
        ws.block(victim.id, WaitKind.QUOTA, f"reclaimed by queue {ws.queue_of(claimant)} "
                                            f"for {claimant.id}: it ran on borrowed capacity")
    else:
        why = "ranked ahead of it" if kind == RANK else f"{kind}, priority {claimant.spec.priority}"
        ws.block(victim.id, WaitKind.PRIORITY, f"preempted by {claimant.id} ({why})")


def _claimant_key(claimant: JobView, wants: Mapping[str, Mapping[Role, int]],
                  gangs: Mapping[str, tuple[Mapping[Role, int], GangKey | None]], allocations: Mapping[str, Allocation],
                  rejected: Mapping[str, str], mixed: bool) -> GangKey | None:
    """The claimant's `gang_key` where its placement depends on free capacity alone (else None): the place
    phase's, found for this very `want`, or computed. (A claimant the place phase keyed for its `want` holds
    nothing, was admitted and, until its own turn, is placed by nobody: callers read that key directly.)"""
    if claimant.allocation.tasks:
        return None
    jid = claimant.id
    want = wants.get(jid)
    if want is None or jid in allocations or jid in rejected:
        return None
    found = gangs.get(jid)
    return found[1] if found is not None and found[0] is want else gang_key(claimant.spec, want, mixed)


def _keys(claimants: list[JobView], wants: Mapping[str, Mapping[Role, int]],
          gangs: Mapping[str, tuple[Mapping[Role, int], GangKey | None]], allocations: Mapping[str, Allocation],
          rejected: Mapping[str, str], mixed: bool) -> list[GangKey | None]:
    """`_claimant_key` of each of `claimants` (the rest of an exhausted pass, none placed yet): the place
    phase's keys found for the very `want` read in C-level passes (such a claimant holds nothing and was
    admitted: the place phase keyed it, then blocked it), the others' computed."""
    ids = list(map(_ID, claimants))
    found = list(map(gangs.get, ids, repeat(_NO_GANG)))
    same = list(map(is_, map(_WANT, found), map(wants.get, ids)))
    keys: list[GangKey | None] = list(map(getitem, zip(repeat(None), map(_GANG, found)), same))
    if not all(same):
        for k in compress(count(), map(not_, same)):
            keys[k] = _claimant_key(claimants[k], wants, gangs, allocations, rejected, mixed)
    return keys


def _skippable(keys: list[GangKey | None], start: int, lost: set[GangKey], misfits: dict[GangKey, Resources],
               free: Resources) -> int:
    """The first index from `start` on whose claimant the loop must try (len(keys): none): the ones before
    it have a key lost or one that did not fit with `free`, the free total now (C-level passes)."""
    gone = map(lost.__contains__, islice(keys, start, None))
    get = cast(Callable[[GangKey | None], Resources | None], misfits.get)  # (None: never a misfit)
    misfit = map(is_, map(get, islice(keys, start, None)), repeat(free))
    return next(compress(count(start), map(not_, map(or_, gone, misfit))), len(keys))


def preempt_with(snap: Snapshot, blocked: list[JobView], ws: Workspace, rule: VictimRule,
                 given: list[GangKey | None] | None = None) -> list[JobView]:
    """The one preemption (module doc): the jobs still blocked after it.

    `given`: each claimant's `_claimant_key` by its position in `rule.claimants(blocked)`, where the caller
    found them (a hook's kept keys: `las.LasPreempt`), read as the place phase's line keys are."""
    still: list[JobView] = []
    out: list[JobView] = []  # victims still out
    lost: set[GangKey] = set()  # `monotone` rules: gangs a claimant could not start even by evicting
    misfits: dict[GangKey, Resources] = {}  # gangs that did not fit as is (`_evict_for`)
    # A gang's key serves the as-is misfits (`try_first`) and the lost gangs (`monotone`); no more.
    keyed = (rule.shortcuts and (rule.try_first or rule.monotone)
             and not (rule.quota_aware and ws.queued))  # (quotas: more than the gang)
    mixed = (keyed or rule.migrate) and ws.memo.traits.mixed
    gangs, wants, allocations, rejected = ws.gangs, ws.want, ws.allocations, ws.rejected
    claimants = rule.claimants(blocked)
    if rule.shortcuts and rule.idle(claimants):
        return list(claimants)
    # The place phase's key of each claimant, where the claimants are its blocked jobs as it left them
    # (`Workspace.blocked_line`: the key `_claimant_key` finds, read by position instead of looked up).
    line = ws.blocked_line
    line_keys = line[1] if keyed and line is not None and line[0] is claimants else None
    if keyed and given is not None:
        line_keys = given
    done = False  # `rule.exhausted`: nobody has anybody to evict from here on; a claimant starts as is or not
    keys: list[GangKey | None] | None = None  # once `done` (`skip_runs`): the keys of claimants[after:]
    after, i, n = 0, 0, len(claimants)
    while i < n:
        if keys is not None:  # (`skip_runs`: leave the run of skippable claimants blocked at once)
            j = _skippable(keys, i - after, lost, misfits, ws.total_free) + after
            if j > i:
                still.extend(claimants[i:j])
                if rule.monotone:  # (each of them did not fit as is: lost, as the step below would say)
                    lost.update(filter(None, islice(keys, i - after, j - after)))  # (none is None)
                i = j
                if i == n:
                    break
        claimant = claimants[i]
        i += 1
        key = None
        if line_keys is not None:
            key = line_keys[i - 1]
        elif keyed:  # (the place phase's key where it found one for this very `want`: `_claimant_key`)
            found = gangs.get(claimant.id, _NO_GANG)
            key = (found[1] if found[0] is wants.get(claimant.id)
                   else _claimant_key(claimant, wants, gangs, allocations, rejected, mixed))
        if key is not None:
            if key in lost:
                still.append(claimant)
                continue
            if done and misfits.get(key) is ws.total_free:  # (`_evict_for`'s shortcut)
                if rule.monotone:
                    lost.add(key)
                still.append(claimant)
                continue
        evicted = _evict_for(rule, ws, claimant, key, misfits)
        if evicted is None:
            if key is not None and rule.monotone:
                lost.add(key)
            if rule.shortcuts and not done:
                done = rule.exhausted(claimant)
                if (done and keyed and (gangs or line_keys is not None) and rule.skip_runs
                        and n - i >= rule.skip_runs_from):
                    after = i
                    keys = (line_keys[i:] if line_keys is not None
                            else _keys(claimants[i:], wants, gangs, allocations, rejected, mixed))
            still.append(claimant)
            continue
        if not evicted:  # (placed as is, most starts: no victim to settle)
            rule.settled(claimant, [], True)
            continue
        ws.note(claimant.id, f"started by preempting {len(evicted)} job(s)")
        for victim, held, kind in reversed(evicted):
            if rule.put_back and ws.fits(victim, held) and (
                    not ws.queued or ws.book.quota_problem(victim, None, held) is None):  # (none: no quota)
                ws.assign(victim, held)  # not needed after all
                continue
            _victim_waits(ws, claimant, kind, victim)
            out.append(victim)
        rule.settled(claimant, list(map(_VICTIM, evicted)), True)
    if rule.migrate:
        last = len(ws.rank)
        failed: dict[GangKey, Resources] = {}  # one-role gangs no victim found room for, with the free total then
        ranks = list(map(ws.rank.get, map(_ID, out), repeat(last)))  # (sorted by a C-level key: the same order)
        for victim in map(out.__getitem__, sorted(range(len(out)), key=ranks.__getitem__)):
            want = ws.want.get(victim.id)
            # A victim holds nothing here: where it may go follows free capacity alone (`gang_key`; its old
            # nodes are only preferred), so a gang that found no room, nothing placed since, finds none again.
            key = gang_key(victim.spec, want, mixed) if rule.shortcuts and want is not None else None
            if key is not None and failed.get(key) is ws.total_free:
                still.append(victim)
            elif want is not None and ws.place(victim, want) is not None:
                ws.note(victim.id, "moved to make room for a higher-ranked job")
            else:
                if key is not None:
                    failed[key] = ws.total_free
                still.append(victim)
    return still


def preempt_lower(snap: Snapshot, blocked: list[JobView], ws: Workspace) -> list[JobView]:
    """Rank preemption (tiresias, srtf): a blocked job evicts jobs ranked after it, lowest first."""
    if not blocked:
        return []
    return preempt_with(snap, blocked, ws, LowerRank(ws))


def preempt(min_runtime: float = MIN_RUNTIME, victim_index: bool = True) -> AfterHook:
    """Priority preemption and reclaim; `victim_index=False` scans every holder (slower, same plans)."""
    def hook(snap: Snapshot, blocked: list[JobView], ws: Workspace) -> list[JobView]:
        return preempt_with(snap, blocked, ws, QueueRules(ws, min_runtime, victim_index))

    return hook
