"""Least-attained-service time sharing inside the queue rules: Tiresias' 2D-LAS for queue-aware presets.

`LasOrder` is the order hook: Tiresias' two attained-service queues
(`tiresias.TiresiasOrder`, the one copy of that logic) refine the queue-aware
base order, which stays first: services, then priority (`queues.job_order_key`);
fair share across queues is applied while placing, as before. Among jobs of
one class a job that attained less service comes first, so a short job that
arrives behind a long one overtakes it once the long one drops to Q1.

`las_preempt` is the phase-5 hook that makes the order preemptive, as
Tiresias is: a blocked job evicts running jobs ranked after it, lowest ranked
first, but only within its own class (same queue, same priority, training
jobs): across queues and priorities the queue rules (`preemption.preempt`:
priority, reclaim, `min_runtime`) still decide who may evict whom. Victims
the claimant did not need are put back.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence
from itertools import accumulate, compress, count, islice, repeat, starmap
from operator import and_, attrgetter, is_, itemgetter, not_
from typing import ClassVar

from trainmaster.core.allocation import Allocation
from trainmaster.core.job import JobKind, JobSpec, Role
from trainmaster.core.resources import Resources, resources_of
from trainmaster.models.book import JobModel
from trainmaster.policies.cycle import GangKey, KeptGangs
from trainmaster.policies.preemption import RANK, VictimRule, preempt_with
from trainmaster.policies.queuebook import IMPLICIT
from trainmaster.policies.queues import job_order_key
from trainmaster.policies.snapshot import JobView, Snapshot, forget_ended
from trainmaster.policies.tiresias import STARVATION, THRESHOLD, TiresiasOrder
from trainmaster.policies.workspace import Workspace

_ID = attrgetter("id")
_CPU, _MEMORY, _GPU = attrgetter("cpu"), attrgetter("memory"), attrgetter("gpu")
_SERVICES, _PRIORITY, _LEFT = itemgetter(0), itemgetter(1), itemgetter(2)  # of an order key
_VIEW, _MODEL, _KEY = itemgetter(0), itemgetter(1), itemgetter(2)  # of a `RemainingOrder.keys` entry
_SIZE, _GANG = itemgetter(0), itemgetter(1)  # of a `KeptGangs.pairs` entry
_NO_PAIR: tuple[object, None] = (object(), None)  # (no size is this object)
_UNSEEN = (None, None, (1, 0, -1.0))  # a missing entry: its view (None) is no job's, so it never serves
_NO_ROOM = Resources()  # (`SameClassLowerRank.room` for a claimant nobody may be evicted for: frozen, shared)


def _class_key(job: JobView) -> tuple[int, int]:
    return job_order_key(job)[:2]  # services first, then higher priority


class LasOrder:
    """Order hook: the queue-aware class first, then Tiresias' attained-service queues (module doc)."""

    def __init__(self, threshold: float = THRESHOLD, starvation: float | None = STARVATION) -> None:
        self.ranks = TiresiasOrder(threshold, starvation)

    def __call__(self, snap: Snapshot) -> list[JobView]:
        return sorted(self.ranks(snap), key=_class_key)  # stable: LAS order within a class


def predicted_remaining(snap: Snapshot, job: JobView) -> float | None:
    """Seconds the job's fitted models say it has left at its current size (pending: its minimum); None: unknown."""
    model = snap.models.get(job.id)
    if model is None or model.remaining is None or model.speed is None:
        return None
    alloc = job.allocation
    if alloc:
        workers = alloc.count(Role.WORKER)  # (one node: 1 below, with or without workers)
        nodes = 1 if alloc.on_one_node else len({t.node for t in alloc.tasks if t.role is Role.WORKER})
    else:
        role = job.spec.roles.get(Role.WORKER)
        workers, nodes = (role.min if role is not None else 1), 1
    return model.remaining_time(max(workers, 1), 0, max(nodes, 1))


class RemainingOrder(LasOrder):
    """Order hook: within a class, the shortest predicted remaining time first (SRTF on learned models).

    A job's remaining time is its remaining steps (the target it trains for,
    less its reported step) over its fitted speed (`predicted_remaining`); a
    job with no prediction yet (it never reported) keeps its LAS place ahead of
    the predicted ones, so a newcomer runs, reports and is measured first, as
    Tiresias' first queue does. Tiresias' ranks are still kept for its wake-ups.

    `keep_keys`: a job's sort key reads its view and its model alone (the controller rebuilds a view when
    its record changes, and a model when a report moves a field a reader may have read: a report that moves
    only the step keeps it, `ModelBook.republished`), so it is kept across decisions while both are the same
    objects (`keys`, declared state): between two decisions most live jobs neither changed nor reported, and
    on Philly (no targets) a report keeps the model. False: every key worked out at every decision (the reference).

    `read_in_c`: the kept keys are read, and which of them still serve found, in C-level passes over the jobs
    (their ids, models and kept entries), with a Python step only for the jobs whose key is worked out again
    (a new view or model: a few per decision). False: a Python loop over every job (the reference).

    `one_class`: when every job is of one class (one priority, no service or only services: every Philly decision)
    the jobs are sorted by their remaining time alone, a float (the sort's C fast path), which orders any two
    jobs as their (class, remaining) tuples do: the same order. False: the tuples compared (the reference).

    `kept_order` (with `keep_keys`): the order itself kept across decisions by the LAS order's own machinery:
    each job's key here leads its entry's key in `TiresiasOrder.keys` (`TiresiasOrder.lead`: this order is
    the keys sorted by (class, remaining, LAS key), which is the stable sort of the LAS order by (class,
    remaining)), so the order is read off them, and a decision works out again only the keys of the jobs the
    snapshot's journal names (a new view) and of those whose model may predict (`watched`: a job whose spec has
    a target; a job without one never has remaining steps, `convergence.remaining_steps`, so its key reads
    its view alone). Only while the journal serves (`TiresiasOrder.follows`); else the leads are dropped and
    the reference sort runs. False: the LAS order sorted by the keys at every decision (the reference).
    """

    keep_keys = True
    read_in_c = True
    one_class = True
    kept_order: ClassVar[bool] = True

    def __init__(self, threshold: float = THRESHOLD, starvation: float | None = STARVATION) -> None:
        super().__init__(threshold, starvation)
        self.keys: dict[str, tuple[JobView, JobModel | None, tuple[int, int, float]]] = {}
        self.watched: set[str] = set()  # live jobs whose key may move with their model (`kept_order`)
        self._snap: Snapshot | None = None  # the snapshot `of` reads models in (`kept_order`)
        self._unsorted = False  # `of` met a NaN remaining time (no order of keys holds it): the reference serves

    def __call__(self, snap: Snapshot) -> list[JobView]:
        ranks = self.ranks
        if self.kept_order and self.keep_keys and ranks.follows(snap):
            forget_ended(self.keys, snap.jobs)
            self._snap = snap
            if ranks.lead is None:
                ranks.lead = self
            if not ranks.led:
                self.watched.clear()  # (every lead is worked out: `of` refills it)
            jobs = ranks(snap)
            if not self._unsorted:
                return jobs
            self._unsorted = False
            ranks.unlead()
            return self._sorted(snap, ranks.ordered(snap))
        ranks.unlead()
        return self._sorted(snap, ranks(snap))

    def of(self, job: JobView) -> tuple[int, int, float]:
        """`kept_order`: the job's key (its lead in `TiresiasOrder.keys`), kept while its view and model are."""
        snap = self._snap
        assert snap is not None
        jid = job.id
        model = snap.models.get(jid)
        seen = self.keys.get(jid)
        if seen is None or seen[0] is not job or seen[1] is not model:
            seen = self.keys[jid] = (job, model, _key(snap, job))
        if _may_predict(job.spec):
            self.watched.add(jid)
        elif self.watched:
            self.watched.discard(jid)
        left = seen[2][2]
        if left != left:  # NaN
            self._unsorted = True
            return (0, 0, 0.0)
        return seen[2]

    def moved(self, snap: Snapshot) -> list[str]:
        """The jobs whose key may have moved without a new view: the watched ones (`of` tells)."""
        watched = self.watched
        if not watched:
            return []
        jobs = snap.jobs
        gone = [jid for jid in watched if jid not in jobs]
        watched.difference_update(gone)
        return list(watched)

    def _sorted(self, snap: Snapshot, jobs: list[JobView]) -> list[JobView]:
        """The LAS order `jobs` sorted by class and remaining time (stable: LAS order among equal keys)."""
        def key(job: JobView) -> tuple[int, int, float]:
            return _key(snap, job)

        if not self.keep_keys:
            return sorted(jobs, key=key)  # stable: LAS order among the unpredicted
        kept = self.keys
        forget_ended(kept, snap.jobs)
        kept_get, model_of = kept.get, snap.models.get
        keys: list[tuple[int, int, float]]
        if self.read_in_c:
            ids = list(map(_ID, jobs))
            models = list(map(model_of, ids))
            got = list(map(kept_get, ids, repeat(_UNSEEN)))
            keys = list(map(_KEY, got))
            serves = list(map(and_, map(is_, map(_VIEW, got), jobs), map(is_, map(_MODEL, got), models)))
            if not all(serves):
                for k in compress(count(), map(not_, serves)):  # (in the jobs' order, as the loop below)
                    job = jobs[k]
                    kept[ids[k]] = (job, models[k], key(job))
                    keys[k] = kept[ids[k]][2]
        else:
            keys = []
            add = keys.append
            for job in jobs:  # (a loop, not a key function: a Python call per job spared)
                jid = job.id
                seen, model = kept_get(jid), model_of(jid)
                if seen is None or seen[0] is not job or seen[1] is not model:
                    seen = kept[jid] = (job, model, key(job))
                add(seen[2])
        if self.one_class and keys and _one_class(keys):
            left = list(map(_LEFT, keys))
            order = sorted(range(len(jobs)), key=left.__getitem__)
        else:
            order = sorted(range(len(jobs)), key=keys.__getitem__)  # stable: as sorting the jobs by key
        return list(map(jobs.__getitem__, order))


def _key(snap: Snapshot, job: JobView) -> tuple[int, int, float]:
    """`RemainingOrder`'s sort key: the class, then the predicted remaining time (-1.0: none yet, first)."""
    left = predicted_remaining(snap, job)
    return (*_class_key(job), -1.0 if left is None else left)


def _may_predict(spec: JobSpec) -> bool:
    """Whether the job's models may ever tell its remaining steps: it has a target (`remaining_steps`)."""
    target = spec.target
    return (target.steps is not None or target.epochs is not None or target.loss is not None
            or target.plateau is not None)


def _one_class(keys: list[tuple[int, int, float]]) -> bool:
    """Whether every key's class (its first two fields) is the first key's (C-level passes)."""
    n = len(keys)
    services, priorities = list(map(_SERVICES, keys)), list(map(_PRIORITY, keys))
    return services.count(services[0]) == n and priorities.count(priorities[0]) == n


class SameClassLowerRank(VictimRule):
    """Victims: training jobs of the claimant's queue and priority ranked after it, lowest ranked first.

    Holders are indexed per class, sorted by rank, with suffix sums of what
    they hold (`room`, an upper bound: evicted holders only lower it), so a
    decision with many claimants costs one sort, not a scan per claimant.

    `lazy_sums`: a class's suffix sums are added up from its last holder down only as far as a claimant's
    room asks (claimants come in rank order, so mostly once, down to the first claimant's place; the holders
    ranked ahead of it are never summed), from the allocations held at set-up (immutable: the same sums, in
    the same order, as at set-up). False: every class's sums at set-up (the reference). `field_sums`: they
    are added field by field in C-level steps (`accumulate` over the integer fields: the same sums) instead of
    a `Resources` built per holder; False: `Resources.__add__` holder by holder (the reference).

    `skip_ahead`: holders ranked at or before the first blocked job are left out at set-up (a victim is ranked
    after its claimant; on the first 3,000 Philly jobs, 80x8, 71% of holders were). False: every holder
    indexed (the reference).
    """

    put_back = True
    quota_aware = True
    lazy_sums = True
    field_sums = True
    skip_ahead = True

    def __init__(self, ws: Workspace, blocked: Sequence[JobView] = ()) -> None:
        self.ws = ws
        rank = ws.rank
        last = self.last = len(rank)
        snap, allocations = ws.snap, ws.allocations
        jobs, training = snap.jobs, JobKind.TRAINING
        # without queue definitions every job's queue is the implicit one (`queue_name`): no frame per job
        queued = self.queued = ws.queued
        holders: dict[tuple[str, int], list[tuple[int, str, Allocation, JobSpec]]] = {}
        # the blocked jobs' ranks, read once (C-level) for `_after` (the first of them) and `claimants`
        self._blocked = (blocked, list(map(rank.get, map(_ID, blocked), repeat(last))))
        for jid in self._after(ws, min(self._blocked[1])) if self.skip_ahead and blocked else allocations:
            alloc, job = allocations[jid], jobs.get(jid)
            if alloc.tasks and job is not None and job.spec.kind is training:
                entry = (rank.get(jid, last), jid, alloc, job.spec)
                holders.setdefault((ws.queue_of(job) if queued else IMPLICIT, job.spec.priority), []).append(entry)
        self.ids: dict[tuple[str, int], list[str]] = {}
        self.ranks: dict[tuple[str, int], list[int]] = {}
        # each holder's allocation and spec at set-up (`ids` loses evicted holders off the end; these stay)
        self.held: dict[tuple[str, int], list[tuple[Allocation, JobSpec]]] = {}
        # sums of the last holders, field by field (cpu, memory, gpu): summed[k] of the last k
        self.summed: dict[tuple[str, int], list[tuple[int, int, int]]] = {}
        for key, entries in holders.items():
            entries.sort()  # (rank, then id: ids are unique, nothing further is compared)
            self.ranks[key] = [r for r, _, _, _ in entries]
            self.ids[key] = [jid for _, jid, _, _ in entries]
            self.held[key] = [(alloc, spec) for _, _, alloc, spec in entries]
            self.summed[key] = [(0, 0, 0)]
            if not self.lazy_sums:
                self._suffix(key, 0)
        self._last: tuple[JobView, tuple[tuple[str, int], int] | None] | None = None  # `_class`, kept
        # `room`'s last answer: the class's sums (the list, by identity), how many of its last holders, their sum
        # (`summed` only grows, its entries never change: the same sum while both match)
        self._room: tuple[list[tuple[int, int, int]] | None, int, Resources] = (None, -1, _NO_ROOM)
        self.ordered: list[JobView] | None = None  # claimants already in this rule's order (`LasPreempt`)

    @staticmethod
    def _after(ws: Workspace, first: int) -> list[str]:
        """The holders ranked after `first`, the first blocked job's rank (C-level steps): only they can be
        anyone's victim."""
        rank, allocations = ws.rank, ws.allocations
        ranked = sorted(filter(allocations.__contains__, rank), key=rank.__getitem__)  # (nearly sorted)
        out = ranked[bisect.bisect_right(ranked, first, key=rank.__getitem__):]
        if len(ranked) < len(allocations):  # holders outside the order: ranked last
            out += sorted(allocations.keys() - rank.keys())
        return out

    def _suffix(self, key: tuple[str, int], i: int) -> Resources:
        """What the class's holders from index `i` on held at set-up (summed from the last one down)."""
        summed, held = self.summed[key], self.held[key]
        n, m = len(held), len(summed)
        if m <= n - i and self.field_sums:  # holders i .. n - m not summed yet: added on from the next one down
            parts = list(starmap(Allocation.resources, reversed(held[i:n - m + 1])))
            cpu, memory, gpu = summed[-1]
            summed += islice(zip(accumulate(map(_CPU, parts), initial=cpu),
                                 accumulate(map(_MEMORY, parts), initial=memory),
                                 accumulate(map(_GPU, parts), initial=gpu), strict=True), 1, None)
        elif m <= n - i:
            total = Resources(*summed[-1])
            for alloc, spec in reversed(held[i:n - m + 1]):
                total = total + alloc.resources(spec)
                summed.append((total.cpu, total.memory, total.gpu))
        return resources_of(*summed[n - i])

    def _rank(self, job: JobView) -> int:
        return self.ws.rank.get(job.id, self.last)

    def _class(self, claimant: JobView) -> tuple[tuple[str, int], int] | None:
        """The claimant's class and the index of its first holder ranked after it; None: it evicts nobody.

        Kept for the claimant being served (`room`, `candidates`, `settled` ask in turn): holders leave only
        off the end, and an index past the end reads as the end there."""
        last = self._last
        if last is not None and last[0] is claimant:
            return last[1]
        found = None
        spec = claimant.spec
        if spec.kind is JobKind.TRAINING:
            key = (self.ws.queue_of(claimant) if self.queued else IMPLICIT, spec.priority)
            ranks = self.ranks.get(key)
            if ranks is not None:  # (the claimant's rank read inline: `_rank`)
                found = (key, bisect.bisect_right(ranks, self.ws.rank.get(claimant.id, self.last)))
        self._last = (claimant, found)
        return found

    def claimants(self, blocked: list[JobView]) -> list[JobView]:
        if blocked is self.ordered:  # (`LasPreempt` sorted them already)
            return blocked
        # (by rank in C-level steps, not a Python key call per blocked job: the same stable order; the ranks
        # read at set-up when these are the blocked jobs it was handed)
        given, ranks = self._blocked
        if blocked is not given:
            ranks = list(map(self.ws.rank.get, map(_ID, blocked), repeat(self.last)))
        return list(map(blocked.__getitem__, sorted(range(len(blocked)), key=ranks.__getitem__)))

    def exhausted(self, claimant: JobView) -> bool:
        """Claimants come in rank order and holders only leave: once every class's last holder is ranked
        ahead of this claimant, nobody has anybody to evict."""
        if claimant.spec.kind is not JobKind.TRAINING:
            return False  # (its rank says nothing of the training claimants after it)
        mine = self._rank(claimant)
        return all(not ranks or ranks[-1] <= mine for ranks in self.ranks.values())

    def room(self, claimant: JobView) -> Resources | None:
        found = self._class(claimant)
        if found is None or found[1] >= len(self.ids[found[0]]):  # (`settled` keeps the last id a holder)
            return _NO_ROOM
        key, i = found
        summed = self.summed[key]
        back = len(self.held[key]) - i
        kept = self._room
        if kept[0] is summed and kept[1] == back:  # (the last answer: a long line's claimants mostly share it)
            return kept[2]
        # (summed that far already: read, no `_suffix` frame)
        room = resources_of(*summed[back]) if back < len(summed) else self._suffix(key, i)
        self._room = (summed, back, room)
        return room

    def candidates(self, claimant: JobView) -> Iterator[tuple[JobView, str]]:
        found = self._class(claimant)
        if found is None:
            return
        key, first = found
        ids, ws = self.ids[key], self.ws
        get = ws.allocations.get
        for i in range(len(ids) - 1, first - 1, -1):
            held = get(ids[i]) if i < len(ids) else None
            if held is not None and held.tasks:  # (`.tasks`: no `Allocation.__bool__` frame)
                yield ws.snap.jobs[ids[i]], RANK

    def settled(self, claimant: JobView, evicted: list[JobView], placed: bool) -> None:
        """Drop the holders evicted for good off the end of the claimant's class. With nobody evicted for it
        nothing left: the last entry of each class holds tasks after every claimant (set-up takes holders
        with tasks, a holder is released only as a victim, and this is called with them once placed or put
        back), so the pass would stop at its first step (most claimants of a busy line fit as is)."""
        if not evicted:
            return
        found = self._class(claimant)
        if found is None:
            return
        ids, ranks = self.ids[found[0]], self.ranks[found[0]]
        get = self.ws.allocations.get
        while ids:  # evicted for good: off the end
            held = get(ids[-1])
            if held is not None and held.tasks:
                break
            ids.pop()
            ranks.pop()


def las_preempt(snap: Snapshot, blocked: list[JobView], ws: Workspace) -> list[JobView]:
    """Phase 5: a blocked job evicts lower-ranked jobs of its own class (module doc)."""
    if not blocked:
        return []
    return preempt_with(snap, blocked, ws, SameClassLowerRank(ws, blocked))


class LasPreempt:
    """`las_preempt` with the claimants' gang keys kept across decisions (a preset's state: one per cycle).

    A queue-aware place phase (`fair_place`) leaves no keyed line, so `preempt_with` looked up and built a
    `gang_key` tuple per claimant in a Python step, and, with no keys found beforehand, stepped through the
    rest of an exhausted pass one claimant at a time (a busy line: ~8,000 of 10,000 claimants per decision).
    Here each claimant's key is kept per view and size object in a `cycle.KeptGangs` (numbered: an int; a
    key reads the view's spec, the size and the cluster's `mixed` alone, the view is frozen and the kept
    sizes hand an unchanged job the same mapping), read for the claimants in C-level passes, and handed to
    `preempt_with` by position (`keys`), which then also leaves the exhausted rest blocked in runs. A key is
    None, as `preemption._claimant_key` says, for a job holding tasks in its view, without a size, or held or
    rejected in this workspace. Switch: `LasPreempt.kept_keys = False` is `las_preempt` (the reference).
    """

    kept_keys: ClassVar[bool] = True

    def __init__(self) -> None:
        self.memo = KeptGangs()
        self.keyed = 0  # claimants handed a kept key (a counter the replay test reads)

    def __call__(self, snap: Snapshot, blocked: list[JobView], ws: Workspace) -> list[JobView]:
        if not blocked or not self.kept_keys or not KeptGangs.kept or not KeptGangs.numbered:
            return las_preempt(snap, blocked, ws)
        rule = SameClassLowerRank(ws, blocked)
        claimants = rule.claimants(blocked)
        rule.ordered = claimants
        return preempt_with(snap, claimants, ws, rule, self._keys(claimants, ws))

    def _keys(self, claimants: list[JobView], ws: Workspace) -> list[GangKey | None]:
        """Each claimant's `_claimant_key`, numbered (class doc)."""
        memo, mixed = self.memo, ws.memo.traits.mixed
        memo.start(mixed, len(ws.snap.jobs))
        pairs, views = memo.pairs, memo.views
        ids = list(map(_ID, claimants))
        wants = list(map(ws.want.get, ids))
        found = list(map(pairs.get, ids, repeat(_NO_PAIR)))
        same = map(and_, map(is_, map(_SIZE, found), wants), map(is_, map(views.get, ids), claimants))
        keys: list[GangKey | None] = list(map(_GANG, found))
        for k in compress(count(), map(not_, same)):  # (a new view or size: a few per decision)
            job, want = claimants[k], wants[k]
            if want is None:
                keys[k] = None
                continue
            key = keys[k] = None if job.allocation.tasks else memo.key(job.spec, want, mixed)
            pairs[ids[k]], views[ids[k]] = (want, key), job
        allocations, rejected = ws.allocations, ws.rejected
        out = set(compress(ids, map(allocations.__contains__, ids)))  # (held or rejected here: no key)
        if rejected:
            out.update(compress(ids, map(rejected.__contains__, ids)))
        if out:
            keys = [None if jid in out else key for jid, key in zip(ids, keys, strict=True)]
        self.keyed += len(keys) - keys.count(None)
        return keys
