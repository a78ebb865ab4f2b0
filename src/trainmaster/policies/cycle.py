"""The scheduling cycle: numbered phases, each a hook that presets fill.

Combining rule: `order` decides who is served first, `size` how many replicas
each job wants, `place` commits gang placements in that order and returns the
jobs it could not place; the `after` hooks run in sequence on those blocked
jobs (preemption, reclaim, reservation and backfill), each returning the jobs
still blocked. A blocked job carries a typed `Wait` in the workspace; hooks
read its kind, never its text. The controller diffs the resulting plan into
actions (phase 6). The order is kept as `Workspace.rank` (who may preempt whom)
and the sizes as `Workspace.want`, so the `after` hooks see them. Where a gang
lands among the nodes that hold it is `scoring`'s weighted sum (workspace doc).
State kept between decisions is declared: `memo` (eligible nodes and never-fits
verdicts for the current cluster); a preset's own (tiresias' queues) is its field.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field, replace
from itertools import chain, compress, filterfalse, islice
from operator import attrgetter, is_not, itemgetter, not_
from time import perf_counter
from types import MappingProxyType
from typing import ClassVar, NamedTuple, cast

from trainmaster.core.job import JobSpec, Role, TransientUse
from trainmaster.core.resources import Resources
from trainmaster.core.states import JobState
from trainmaster.policies.objectives import apply_objectives
from trainmaster.policies.pending import PendingLine
from trainmaster.policies.scoring import DEFAULT, Scoring
from trainmaster.policies.snapshot import JobView, PendingIds, Plan, Snapshot
from trainmaster.policies.waits import Wait
from trainmaster.policies.workspace import ClusterMemo, Workspace, minimum, never_fits

Sizes = dict[str, dict[Role, int]]
OrderHook = Callable[[Snapshot], list[JobView]]
SizeHook = Callable[[Snapshot, list[JobView], Workspace], Sizes]
PlaceHook = Callable[[Snapshot, list[JobView], Mapping[str, Mapping[Role, int]], Workspace], list[JobView]]
AfterHook = Callable[[Snapshot, list[JobView], Workspace], list[JobView]]
LinePlace = Callable[[Snapshot, list[str], PendingLine, Workspace], bool]  # `Cycle.from_line`


_SUBMIT_ORDER = attrgetter("submit_time", "id")
_SUBMIT = attrgetter("submit_time")
_ID = attrgetter("id")
_KEY_ID = itemgetter(1)  # of a (submit time, id) key
_KEY, _RANK = itemgetter(0), itemgetter(1)  # of a `PendingRank.gang_of` entry (and of a (rank, slot) pair)


def by_submit_time(snap: Snapshot) -> list[JobView]:
    """FIFO order: submit time, then id."""
    return sorted(snap.jobs.values(), key=_SUBMIT_ORDER)


def current_or_min(snap: Snapshot, jobs: list[JobView], ws: Workspace) -> Sizes:
    """Fixed sizing: running jobs keep their replicas, pending jobs ask for their minimum."""
    sizes: Sizes = {}
    running, starting = JobState.RUNNING, JobState.STARTING
    for job in jobs:
        alloc = job.allocation
        state = job.state  # (`JobView.active`, inlined: every live job, every decision)
        if alloc.tasks and (state is running or state is starting):
            counts = alloc.role_counts
            roles = job.spec.roles
            if len(counts) == 1 and len(roles) == 1:  # one role (most jobs): a copy will do
                sizes[job.id] = dict(counts)
            else:
                sizes[job.id] = {role: counts.get(role, 0) for role in roles}
        else:
            sizes[job.id] = {role: s.min for role, s in job.spec.roles.items()}  # (`minimum`, inlined)
    return sizes


class KeptSizes:
    """`current_or_min` for the jobs whose view changed; the others' sizes as an earlier decision made them.

    A job's size reads its view alone (allocation, state, spec: a frozen view), and the controller rebuilds a
    view only when its record changes (identity is the key), so an unchanged job costs C-level lookups instead
    of a dict built per decision. The size dicts are shared across decisions: only for presets whose later
    phases may replace a size but never edit one in place (`apply_objectives` replaces; tiresias' and srtf's
    place and preemption only read). Its state (the views and sizes last seen) is the preset's, declared here.
    The reference: `current_or_min` itself as the size hook.

    `follow` (an instance's `journal`, with the class switch `followed`): the sizes of every live job are kept
    as one mapping (`out`) from one full snapshot to the next, and a decision looks only at the jobs the
    snapshot's journal names (`PendingIds.changed`: views rebuilt since the previous snapshot; `joined`: jobs
    new to the line, arrivals included), dropping the jobs that left (a C-level difference, only when the
    count says some did): no pass over every live job (three C-level passes and a dict built, per decision,
    before). A copy is handed out (`apply_objectives` may replace entries). Its keys are the same, in
    another order: tiresias and srtf read the sizes by id only. Where the journal cannot serve (no journal,
    another snapshot than the next one, a snapshot of some jobs, rejected jobs left out of `jobs`) the
    reference passes run and the mapping starts again from them.
    """

    followed: ClassVar[bool] = True  # False: every instance takes the passes over every job (the reference)

    def __init__(self, journal: bool = False) -> None:
        self.views: dict[str, JobView] = {}
        self.sizes: Sizes = {}
        self.journal = journal  # (tiresias, srtf: sizes read by id alone)
        self.out: Sizes | None = None  # every live job's size at snapshot `stamp` (`journal`)
        self.stamp: tuple[object, int] | None = None

    def __call__(self, snap: Snapshot, jobs: list[JobView], ws: Workspace) -> Sizes:
        follow = self.journal and self.followed
        if follow:
            out = self._follow(snap, jobs, ws)
            if out is not None:
                return dict(out)
        views, kept = self.views, self.sizes
        ids = list(map(_ID, jobs))
        changed = list(compress(jobs, map(is_not, jobs, map(views.get, ids))))
        if changed:
            kept.update(current_or_min(snap, changed, ws))
            views.update(zip(map(_ID, changed), changed, strict=True))
            if len(views) > 4 * len(ids) + 256:  # (jobs that left: forget them once they are most of it)
                self.views = {jid: views[jid] for jid in ids}
                self.sizes = {jid: kept[jid] for jid in ids}
                kept = self.sizes
        sizes = dict(zip(ids, map(kept.__getitem__, ids), strict=True))
        if follow:
            full = self._whole(snap, jobs)
            self.out, self.stamp = (dict(sizes), full) if full is not None else (None, None)
        return sizes

    @staticmethod
    def _whole(snap: Snapshot, jobs: list[JobView]) -> tuple[object, int] | None:
        """The snapshot's (origin, version) where `jobs` are every live job of a journaled snapshot (its
        pending jobs and its holders, none rejected); else None."""
        pending, held = snap.pending_ids, snap.held
        if not isinstance(pending, PendingIds) or pending.changed is None or held is None:
            return None
        if not len(jobs) == len(snap.jobs) == len(pending) + len(held):  # (a pending-only snapshot: fewer)
            return None
        return pending.origin, pending.version

    def _follow(self, snap: Snapshot, jobs: list[JobView], ws: Workspace) -> Sizes | None:
        """`out` moved on to this snapshot by its journal; None where it cannot be (class doc)."""
        out, stamp = self.out, self._whole(snap, jobs)
        if out is None or stamp is None or self.stamp != (stamp[0], stamp[1] - 1):
            return None
        pending = snap.pending_ids
        assert isinstance(pending, PendingIds) and pending.changed is not None
        live, views, kept = snap.jobs, self.views, self.sizes
        moved = list(pending.changed | pending.joined)  # (a few per decision)
        here = list(filter(live.__contains__, moved))  # (the ones that left go with the others below)
        fresh = [job for job in map(live.__getitem__, here) if views.get(job.id) is not job]
        if fresh:
            kept.update(current_or_min(snap, fresh, ws))
            views.update(zip(map(_ID, fresh), fresh, strict=True))
        out.update(zip(here, map(kept.__getitem__, here), strict=True))
        if len(out) != len(live):  # (jobs that finished or left: not journaled)
            for jid in out.keys() - live.keys():
                del out[jid]
            if len(out) != len(live):  # (cannot happen: every job new to the snapshot is journaled)
                self.out = self.stamp = None
                return None
        if len(views) > 4 * len(out) + 256:  # (jobs that left: forget them once they are most of it)
            self.views = {jid: views[jid] for jid in out}
            self.sizes = {jid: kept[jid] for jid in out}
        self.stamp = stamp
        return out


# A gang's key: `gang_key`'s tuple, or the number `KeptGangs` gave it (within one decision every key of one
# kind: equal gangs, equal keys; a number hashes as an int, a tuple of seven fields each lookup).
GangKey = Hashable


def gang_key(spec: JobSpec, want: Mapping[Role, int], mixed: bool) -> tuple[object, ...] | None:
    """What finding room for a one-role gang that holds nothing depends on besides free capacity; None for
    other gangs (several roles, anchors on on-demand nodes where `mixed`: `ClusterTraits.mixed`). Whether
    such a gang fits only grows with the free capacity of every node (a single node, or a greedy fill
    counting whole tasks per node)."""
    if len(want) != 1:
        return None
    ((role, n),) = want.items()
    if n > 1 and mixed and spec.anchored:  # (`workspace.anchored`)
        return None
    r = spec.roles[role].resources  # (plain values: C-level hashing)
    return (spec.transient is TransientUse.NEVER, spec.require_gpu_types, role, r.cpu, r.memory, r.gpu, n)


class KeptGangs:
    """`gang_key` per job view, kept across decisions by one place hook (its policy's state).

    A key reads the view's spec, the size asked and the cluster's `mixed` alone; the view is frozen and
    rebuilt only when its record changes, and `KeptSizes` hands an unchanged view the same size mapping
    each decision, so an entry found for this very view and mapping is the key `gang_key` would compute
    (two lookups instead of a call and a tuple built per pending job per decision: most of a long line).
    The (size, key) pair itself is what the place phase leaves for preemption (`Workspace.gangs`).
    Switch: `KeptGangs.kept = False` computes every key afresh (the reference).

    `numbered` (with `kept`): a kept key is the number of its tuple (`numbers`: the keys met, numbered as
    met), so the place loop's misfit lookups, the blocked line and preemption's `lost`/`misfits` lookups over
    it hash an int instead of the tuple's seven fields (a long line: a few lookups per waiting job per
    decision). Equal tuples, equal numbers, while the memo lives (forgotten together). False: the tuples.
    """

    kept: ClassVar[bool] = True
    numbered: ClassVar[bool] = True

    def __init__(self) -> None:
        self.views: dict[str, JobView] = {}
        self.pairs: dict[str, tuple[Mapping[Role, int], GangKey | None]] = {}
        self.mixed: bool | None = None  # the cluster's `mixed` the keys were found for
        self.numbers: dict[tuple[object, ...], int] = {}  # `numbered`: each key tuple met -> its number

    def start(self, mixed: bool, live: int) -> None:
        """Before a decision with `live` jobs: forget every key when `mixed` changed (another cluster), and
        the jobs that left once they are most of what is kept."""
        if mixed is not self.mixed or len(self.pairs) > 4 * live + 256:
            self.views, self.pairs, self.mixed, self.numbers = {}, {}, mixed, {}

    def key(self, spec: JobSpec, want: Mapping[Role, int], mixed: bool) -> GangKey | None:
        """`gang_key`, or its number (`numbered`)."""
        key = gang_key(spec, want, mixed)
        if key is None or not self.numbered:
            return key
        number = self.numbers.get(key)
        if number is None:
            number = self.numbers[key] = len(self.numbers) + 1  # (from 1: a key is never falsy)
        return number


class PendingRank:
    """The pending jobs in rank order, with the gang key each asks at its minimum, kept across decisions by the
    order hook that ranks them (`TiresiasOrder`) and moved on by the snapshot's journal: step 1 of the blocked
    rest kept across decisions (`bench/results/tiresias-blocked-rest.md`). A long line's blocked rest is its
    pending jobs past the point where every gang key still ahead failed; the place phase can only leave it
    unwritten (per-key segments) if who is pending, in which order, and under which key, is known without a
    pass over the line. `order` holds the pending jobs' rank keys sorted (the order's own keys, unique, with the
    id last); `by_gang` each gang key's part of it (sorted); `gang_of` each pending id's (key, its rank key).

    Keys: `gang_key(spec, minimum(spec), False)` (what a pending job of `current_or_min` asks); a job whose gang
    has no key on a mixed cluster (`anchored`, n > 1) is listed in `anchored`. The order calls `move` when it
    rekeys an entry, `drop` when a job leaves, `follow` after a full visit. Where the journal cannot serve
    (a version skipped, a partial visit in between, a count that disagrees) `follow` rebuilds from the pending
    ids (the reference path; the class switch `kept = False` rebuilds every time); a snapshot without a journal
    leaves it stale (`at` None: no reader uses it). `at`: the snapshot it is of, for a reader (`blocked_rest`).
    """

    kept: ClassVar[bool] = True

    def __init__(self) -> None:
        self.order: list[tuple[object, ...]] = []
        self.by_gang: dict[GangKey | None, list[tuple[object, ...]]] = {}
        self.gang_of: dict[str, tuple[GangKey | None, tuple[object, ...]]] = {}
        self.anchored: set[str] = set()
        self.stamp: tuple[object, int] | None = None  # the snapshot `order` is of (None: rebuild next time)
        self.at: Snapshot | None = None  # the very snapshot `follow` last moved it to (None: stale)
        # Each key met gets a slot (`keyed[slot]`: the key, one tuple for equal keys; `slot_of`: by the tuple's
        # `id`, as a key holds a `Role`, whose hash is a Python frame), and `slots` holds each ranked job's slot,
        # beside `order`: a reader takes a run of the line's keys as a slice (`blocked_rest`).
        self.slot: dict[GangKey | None, int] = {}
        self.keyed: list[GangKey | None] = []
        self.slot_of: dict[int, int] = {}
        self.slots: list[int] = []
        self.rebuilt = 0  # full rebuilds (the tests count the journal's share)

    @staticmethod
    def gang(spec: JobSpec) -> tuple[GangKey | None, bool]:
        """A pending job's gang key at its minimum (not mixed), and whether a mixed cluster gives it none."""
        want = minimum(spec)
        key = gang_key(spec, want, False)
        return key, key is not None and key[-1] != 1 and spec.anchored  # (`gang_key`'s mixed rule: n > 1)

    def _gang(self, spec: JobSpec) -> tuple[GangKey | None, int, bool]:
        """`gang`, its key interned, with its slot."""
        key, anchored = self.gang(spec)
        slot = self.slot.get(key)
        if slot is None:
            slot = self.slot[key] = len(self.keyed)
            self.keyed.append(key)
            self.slot_of[id(key)] = slot
        return self.keyed[slot], slot, anchored

    def _add(self, jid: str, spec: JobSpec, rank: tuple[object, ...]) -> None:
        key, slot, anchored = self._gang(spec)
        self.gang_of[jid] = (key, rank)
        at = bisect.bisect_right(self.order, rank)
        self.order.insert(at, rank)
        self.slots.insert(at, slot)
        bisect.insort(self.by_gang.setdefault(key, []), rank)
        if anchored:
            self.anchored.add(jid)

    def drop(self, jid: str) -> None:
        """`jid` is pending no more (or left)."""
        found = self.gang_of.pop(jid, None)
        if found is None:
            return
        key, rank = found
        order = self.order
        at = bisect.bisect_left(order, rank)
        del order[at]
        del self.slots[at]
        part = self.by_gang[key]
        del part[bisect.bisect_left(part, rank)]
        if not part:
            del self.by_gang[key]
        self.anchored.discard(jid)

    def move(self, jid: str, rank: tuple[object, ...]) -> None:
        """The order rekeyed `jid` (a pending job's new rank key)."""
        found = self.gang_of.get(jid)
        if found is None or found[1] == rank:
            return
        key = found[0]
        self.gang_of[jid] = (key, rank)
        order, part, slots = self.order, self.by_gang[key], self.slots
        at = bisect.bisect_left(order, found[1])
        del order[at]
        slot = slots.pop(at)
        del part[bisect.bisect_left(part, found[1])]
        at = bisect.bisect_right(order, rank)
        order.insert(at, rank)
        slots.insert(at, slot)
        bisect.insort(part, rank)

    def stale(self) -> None:
        """A visit the journal does not follow (a partial snapshot): rebuild at the next full one."""
        self.stamp = self.at = None

    def follow(self, snap: Snapshot, rank_of: Callable[[str], tuple[object, ...]]) -> None:
        """After the order's full visit of `snap`: the pending jobs moved on by its journal, or rebuilt."""
        pending = snap.pending_ids
        stamp = ((pending.origin, pending.version) if isinstance(pending, PendingIds)
                 and pending.changed is not None else None)
        if stamp is None and self.kept:  # (no journal, a bare snapshot: a rebuild per decision, a key per
            self.stamp = self.at = None  # pending job, would cost more than any reader saves: none is served)
            return
        self.at = snap
        if (not self.kept or stamp is None or self.stamp is None or self.stamp != (stamp[0], stamp[1] - 1)):
            self.rebuild(snap, rank_of)
            self.stamp = stamp
            return
        assert isinstance(pending, PendingIds) and pending.changed is not None
        jobs, gang_of = snap.jobs, self.gang_of
        for jid in pending.changed | pending.joined | pending.left:  # (a few per decision)
            view = jobs.get(jid)
            if jid in gang_of:
                self.drop(jid)  # (a rebuilt view: its spec may differ, so its key)
            if view is not None and view.pending:  # (the view's, not `jid in pending`: a scan of a tuple)
                self._add(jid, view.spec, rank_of(jid))
        if len(gang_of) != len(pending):  # (a pending job gone without a journal entry: the count tells)
            self.rebuild(snap, rank_of)
        self.stamp = stamp

    def rebuild(self, snap: Snapshot, rank_of: Callable[[str], tuple[object, ...]]) -> None:
        """From the snapshot's pending ids (the reference)."""
        self.rebuilt += 1
        pending = snap.pending_ids
        if pending is None:
            pending = tuple(jid for jid, j in snap.jobs.items() if j.pending)
        jobs, gang = snap.jobs, self._gang
        by_gang: dict[GangKey | None, list[tuple[object, ...]]] = {}
        gang_of: dict[str, tuple[GangKey | None, tuple[object, ...]]] = {}
        anchored: set[str] = set()
        ranked: list[tuple[tuple[object, ...], int]] = []
        for jid in pending:
            key, slot, anchor = gang(jobs[jid].spec)
            rank = rank_of(jid)
            gang_of[jid] = (key, rank)
            ranked.append((rank, slot))
            by_gang.setdefault(key, []).append(rank)
            if anchor:
                anchored.add(jid)
        for part in by_gang.values():
            part.sort()
        ranked.sort()  # (ranks are unique: the id is their last field)
        self.order = list(map(_KEY, ranked))
        self.slots = list(map(_RANK, ranked))
        self.by_gang, self.gang_of, self.anchored = by_gang, gang_of, anchored

    def gangs(self, mixed: bool) -> list[GangKey | None]:
        """Each pending job's gang key, in rank order, on a cluster `mixed` or not (`gang_key`'s)."""
        by_rank = {rank: (None if mixed and jid in self.anchored else key)
                   for jid, (key, rank) in self.gang_of.items()}
        return list(map(by_rank.__getitem__, self.order))


class BlockedLine:
    """The switches of `place_in_order`'s `Workspace.blocked_line`.

    `line_keys` False: preemption sorts and keys its claimants itself (the reference). `cut` (step 2 of the
    blocked rest, `bench/results/tiresias-blocked-rest.md`): where the order keeps its pending jobs in rank
    order (`PendingRank`, tiresias), the place loop stops at the point where every gang key still ahead
    failed with the current free total, and leaves the rest's outcome in C-level passes (`blocked_rest`).
    False: the order keeps no line and the loop walks every job (the reference)."""

    line_keys: ClassVar[bool] = True
    cut: ClassVar[bool] = True
    cut_from: ClassVar[int] = 64  # (a shorter rest: the loop's steps cost less than the passes' set-up)


def _ignore(key: GangKey | None) -> None:
    return


def _same(key: GangKey) -> GangKey | None:
    return key


_LAST = itemgetter(-1)  # of a rank key: the id


class Rest(NamedTuple):
    """The place loop's outcome for the jobs after a cut (`blocked_rest`): the blocked ones in rank order."""

    ids: list[str]
    views: list[JobView]
    keys: list[GangKey | None]  # as the loop keys them
    waits: list[Wait]


class Awaited(NamedTuple):
    """Why `blocked_rest` could not cut: a key with jobs ahead that did not fail with the free total now, as
    the loop keys it (None: one it has not keyed yet, or no key), so the loop asks again only once it fails."""

    key: GangKey | None


def blocked_rest(line: PendingRank, jid: str, failed: Mapping[GangKey, tuple[Resources, Wait]],
                 numbers: list[GangKey | None], ws: Workspace, views: Mapping[str, JobView]) -> Rest | Awaited | None:
    """What the place loop would do with the jobs ranked after `jid` (a pending job it just blocked), found
    without a step per job; else the key it awaits (`Awaited`), or None where it cannot tell this decision.

    It can tell where every gang key among the pending jobs ranked after `jid` failed with the current free
    total (`failed`, keyed as the loop keys them: `numbers[slot]`, the loop's key of `line.keyed[slot]`): the
    loop then blocks each of them with its key's wait, and passes every job holding resources, which keeps
    what it holds (the caller's contract: a holder's `want` is its held counts and a pending job's its
    minimum, `current_or_min` without models). The jobs are read off `line` (rank order, the rejected left
    out): their ids, their views (`views`: the snapshot's, the loop's own objects), their keys as the loop
    keys them and their waits, each a slice or a C-level pass.
    """
    found = line.gang_of.get(jid)
    if found is None:
        return None
    rank, free, rejected, slot_of = found[1], ws.total_free, ws.rejected, line.slot_of
    waits: list[Wait | None] = [None] * len(numbers)
    for key, part in line.by_gang.items():  # (a few keys)
        if part[-1] <= rank:  # (none of it is after `jid`)
            continue
        slot = slot_of[id(key)]
        n = numbers[slot] if key is not None else None
        seen = None if n is None else failed.get(n)
        if seen is None or seen[0] is not free:
            start = bisect.bisect_right(part, rank)
            if not rejected or len(part) - start > len(rejected) or not all(
                    map(rejected.__contains__, map(_LAST, islice(part, start, None)))):
                return None if key is None else Awaited(n)  # (a key the loop would search for again)
            continue
        waits[slot] = seen[1]
    start = bisect.bisect_right(line.order, rank)
    ids = list(map(_LAST, line.order[start:]))
    slots = line.slots[start:]
    if rejected:
        keep = list(map(not_, map(rejected.__contains__, ids)))
        ids, slots = list(compress(ids, keep)), list(compress(slots, keep))
    return Rest(ids, list(map(views.__getitem__, ids)), list(map(numbers.__getitem__, slots)),
                cast(list[Wait], list(map(waits.__getitem__, slots))))


def place_in_order(strict: bool, skip_misfits: bool = True, ranked: PendingRank | None = None) -> PlaceHook:
    """Place jobs whole, in order. `strict`: the first job that does not fit blocks all later pending ones.

    `skip_misfits`: a pending job whose gang (`gang_key`, kept per view: `KeptGangs`) did not fit, with
    nothing placed or released since, waits with the same wait without a search (most of a long line, on a
    busy cluster).

    With `skip_misfits`, over the workspace's own ranked jobs and `line_keys` on, the blocked jobs (in rank
    order) and the gang key each was found with are left as `Workspace.blocked_line`, so preemption neither
    checks their order nor reads their keys again (one append per blocked job instead of passes over the line).

    `ranked`: the order's pending jobs in rank order (`PendingRank`), for a policy whose pending jobs ask their
    minimum (`current_or_min`): with `BlockedLine.cut`, once every key still ahead failed, the rest's outcome
    comes from `blocked_rest` (no step, no `Workspace.gangs` entry per job; the same waits, blocked jobs and
    line keys, in the same order).
    """
    memo = KeptGangs()

    def place(snap: Snapshot, jobs: list[JobView], sizes: Mapping[str, Mapping[Role, int]],
              ws: Workspace) -> list[JobView]:
        blocked: list[JobView] = []
        head: JobView | None = None
        failed: dict[GangKey, tuple[Resources, Wait]] = {}  # gang -> the free total it failed with, its wait
        mixed = skip_misfits and ws.memo.traits.mixed
        allocations, wanted = ws.allocations, sizes.get  # (the workspace never rebinds its allocations)
        kept = KeptGangs.kept
        if kept:
            memo.start(mixed, len(jobs))
        gangs, views, pairs = ws.gangs, memo.views, memo.pairs
        lined = skip_misfits and not strict and BlockedLine.line_keys and ws.ranked is jobs
        line: list[GangKey | None] = []
        keyed = line.append if lined else _ignore
        # (The line must be this very snapshot's, with every live job either pending in it or holding: the
        # rejected are pending jobs of the line left out of `jobs`.)
        cut = (ranked if lined and ranked is not None and BlockedLine.cut and ranked.at is snap and not mixed
               and not snap.models and len(jobs) > BlockedLine.cut_from and snap.held is not None
               and len(jobs) == len(ranked.gang_of) - len(ws.rejected) + len(snap.held) else None)
        number = cast(Callable[[GangKey], GangKey | None], memo.numbers.get) if kept and KeptGangs.numbered else _same
        numbers: list[GangKey | None] = []  # the loop's key of each of the line's keys (`blocked_rest`)
        met = -1  # (`memo.numbers`' size when `numbers` was read: a key met since may be numbered now)
        awaited: GangKey | None = None  # (`Awaited`: the cut waits for this key's next failure)
        for job in jobs:  # (a step per live job, most of them keeping what they hold: kept lean)
            jid = job.id
            want = wanted(jid)
            if want is None:
                continue
            if head is not None and not (job.active and jid in allocations):
                ws.block_behind(jid, head.id)
                blocked.append(job)
                continue
            held = allocations.get(jid)
            if held is not None and held.tasks and (  # (`Allocation.__bool__`, inlined)
                    held.role_counts == want or all(held.count(r) == n for r, n in want.items())):
                continue  # keeps what it holds
            key = None
            if skip_misfits and not held and not job.allocation.tasks:
                pair = pairs.get(jid) if kept else None
                if pair is None or pair[0] is not want or views.get(jid) is not job:
                    if kept:
                        pair = pairs[jid] = (want, memo.key(job.spec, want, mixed))
                        views[jid] = job
                    else:
                        pair = (want, gang_key(job.spec, want, mixed))
                gangs[jid] = pair  # (preemption reads it again: `preempt_with`)
                key = pair[1]
            if key is not None:
                seen = failed.get(key)
                if seen is not None and seen[0] is ws.total_free:  # (the same object: nothing moved since)
                    ws.waits[jid] = seen[1]
                    blocked.append(job)
                    keyed(key)
                    continue
            alloc = ws.place(job, want)
            if alloc is None:
                if held:  # cannot resize: keep the current allocation
                    continue
                ws.block_for_room(job, want)
                blocked.append(job)
                keyed(key)
                if key is not None:
                    failed[key] = (ws.total_free, ws.waits[jid])
                    if (cut is not None and (awaited is None or awaited == key)
                            and len(jobs) - ws.rank[jid] > BlockedLine.cut_from):
                        # (a fresh failure: maybe the last search the rest needs)
                        if met != len(memo.numbers) or len(numbers) != len(cut.keyed):
                            met, numbers = len(memo.numbers), list(map(number, cut.keyed))
                        rest = blocked_rest(cut, jid, failed, numbers, ws, snap.jobs)
                        if isinstance(rest, Rest):
                            ws.waits.update(zip(rest.ids, rest.waits, strict=True))
                            blocked.extend(rest.views)
                            line.extend(rest.keys)
                            break
                        if rest is None:
                            cut = None  # (a job ahead with no key: the loop walks the rest)
                        else:
                            awaited = rest.key
                if strict and head is None:
                    head = job
        if lined:
            ws.blocked_line = (blocked, line)
        return blocked

    return place


def head_of_line(snap: Snapshot, ids: list[str], line: PendingLine, ws: Workspace) -> bool:
    """`from_line` for strict submit order at the minimum size (fifo): place up to the first job that does
    not fit; every later one waits behind it (C-level passes over the line, no Python step per job)."""
    jobs, bad = snap.jobs, line.bad
    for i, jid in enumerate(ids):
        if jid in bad:
            continue
        job = jobs[jid]
        want = minimum(job.spec)
        if ws.place(job, want) is None:
            tail = line.tail(snap, ids, i, ws.memo)
            if tail is not None:  # the rest wait behind it as one segment
                ws.block_tail(tail)
            else:
                rest = islice(ids, i + 1, None)
                # The head first (its own wait replaces the shared one, in place): one dict built for the line.
                ws.block_all_behind(chain((jid,), filterfalse(bad.__contains__, rest) if bad else rest), jid)
            ws.block_for_room(job, want)
            break
    return True


_UNSEEN = "?"  # `ClusterMemo.never` has no verdict yet (a verdict is None or a non-empty reason)


def _pending_only(snap: Snapshot) -> Snapshot:
    """The snapshot with only its pending jobs (free capacity still counts what running jobs hold)."""
    if snap.pending_ids is not None:
        jobs = {jid: snap.jobs[jid] for jid in snap.pending_ids}
    else:
        jobs = {jid: j for jid, j in snap.jobs.items() if j.pending}
    return replace(snap, jobs=MappingProxyType(jobs))


def _without(ordered: list[JobView], bad: Mapping[str, str], ws: Workspace) -> list[JobView]:
    """`ordered` less the jobs in `bad`, each rejected with its reason (in `ordered`'s order)."""
    if not bad:
        return list(ordered)
    admitted = []
    for job in ordered:
        if job.id in bad:
            ws.rejected[job.id] = bad[job.id]
        else:
            admitted.append(job)
    return admitted


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
    scoring: Scoring = DEFAULT  # node scorers and weights (policies.scoring; TIGHTEST alone on a plain cluster)
    uses_models: bool = False  # the controller fits models online from reports (Policy protocol)
    memo: ClusterMemo | None = field(default=None, repr=False)  # cross-decision: eligible nodes, never-fits
    # Optional fast path for `pending_only` cycles without `after` hooks: phases 3-4 from the line of pending
    # jobs kept across decisions (`pending.PendingLine`), for a cost that follows what changed. It must plan
    # exactly as the phases would, and returns False (having changed nothing) where it cannot.
    from_line: LinePlace | None = None
    line: PendingLine | None = field(default=None, repr=False)  # cross-decision: the line `from_line`, `admit` read
    # A hint to the controller, never a change to what is decided: True when a decision looks up only the jobs
    # that changed and a few more (fifo's line), so a snapshot may hold a frozen book of the jobs
    # (`controller.views.Frozen`: a Python call per lookup) instead of a copy of every one.
    reads_few_jobs: bool = False
    # False: `admit` sorts every job and asks each pending job's verdict, every decision (the slow reference).
    kept_line: ClassVar[bool] = True

    def admit(self, snap: Snapshot, ws: Workspace) -> list[JobView]:
        """Phase 2: reject pending jobs that can never fit (with the reason); order the rest."""
        if self.kept_line:
            return self._admit_from_line(snap, ws)
        ordered = self.order(snap)
        pending = snap.pending_ids
        if pending is None:
            pending = tuple(job.id for job in ordered if job.pending)
        never = ws.memo.never
        bad: dict[str, str] = {}
        for jid in pending:  # only pending jobs: one that holds resources fits by definition
            reason = never.get(jid, _UNSEEN)
            if reason is _UNSEEN:
                reason = never[jid] = never_fits(snap.jobs[jid].spec, snap, ws.memo)
            if reason:
                bad[jid] = reason
        return _without(ordered, bad, ws)

    def _admit_from_line(self, snap: Snapshot, ws: Workspace) -> list[JobView]:
        """`admit` with the never-fits verdicts (and, in submit order, the pending jobs' order) kept across
        decisions in `line`: C-level passes and a Python step per job that joined, never one per pending job.
        Submit order merges the line with the sorted others (running jobs: few beside a long line)."""
        line = self.line = self.line or PendingLine()
        pending = snap.pending_ids
        if pending is None:
            pending = tuple(jid for jid, j in snap.jobs.items() if j.pending)
        line.sync(snap, pending, ws.memo)
        bad = line.bad
        if self.order is not by_submit_time:
            return _without(self.order(snap), line.rejected(line.ids, ws.memo), ws)
        if bad:
            ws.rejected.update(line.rejected(line.ids, ws.memo))  # (in line order: the order's own)
        jobs = snap.jobs
        others = jobs.keys() - line.key_of.keys()
        keys = line.keys + sorted(zip(map(_SUBMIT, map(jobs.__getitem__, others)), others, strict=True))
        keys.sort()  # (two sorted runs: one merge)
        ids = map(_KEY_ID, keys)
        return list(map(jobs.__getitem__, filterfalse(bad.__contains__, ids) if bad else ids))

    def decide(self, snap: Snapshot) -> Plan:
        return self.decide_in(snap)[0]

    def decide_in(self, snap: Snapshot) -> tuple[Plan, Workspace]:
        """`decide`, with the decision's workspace (its per-decision memos, for a subclass's last step): the one
        path, `from_line`'s or the phases'."""
        if self.from_line is not None and self.pending_only and not self.preemptive and not self.after:
            found = self._decide_from_line(snap, self.from_line)
            if found is not None:
                return found
        return self.phases(snap, pending_only=self.pending_only, after=self.after)

    def _decide_from_line(self, snap: Snapshot, place: LinePlace) -> tuple[Plan, Workspace] | None:
        """The phases for a pending-only cycle, with admit and order kept across decisions (`from_line`); the
        plan and the decision's workspace."""
        clock = perf_counter
        t0 = clock()
        ws = Workspace(snap, memo=self.memo, scoring=self.scoring)  # 1. scratch copy
        memo = self.memo = ws.memo
        line = self.line = self.line or PendingLine()
        pending = snap.pending_ids
        if pending is None:
            pending = tuple(jid for jid, j in snap.jobs.items() if j.pending)
        t1 = clock()
        ids = line.sync(snap, pending, memo)  # 2. admit: the line in order, never-fits verdicts
        if line.bad:
            ws.rejected.update(line.rejected(ids, memo))
        t2 = clock()
        if not place(snap, ids, line, ws):  # 3-4. size and place
            return None
        t3 = clock()
        plan = ws.plan()  # 6. the controller diffs the plan into actions
        return replace(plan, timings={"snapshot": t1 - t0, "admit": t2 - t1, "size": 0.0, "place": t3 - t2,
                                      "after": 0.0, "plan": clock() - t3}), ws

    def run(self, snap: Snapshot, *, pending_only: bool, after: tuple[AfterHook, ...]) -> Plan:
        """The numbered phases; `pending_only` and `after` as the fields of the same names."""
        return self.phases(snap, pending_only=pending_only, after=after)[0]

    def phases(self, snap: Snapshot, *, pending_only: bool, after: tuple[AfterHook, ...]) -> tuple[Plan, Workspace]:
        """`run`, with the decision's workspace (its per-decision memos, for a subclass's last step)."""
        clock = perf_counter
        t0 = clock()
        ws = Workspace(snap, empty=self.preemptive, memo=self.memo, scoring=self.scoring)  # 1. scratch copy
        self.memo = ws.memo
        seen = _pending_only(snap) if pending_only and not self.preemptive else snap
        t1 = clock()
        jobs = self.admit(seen, ws)  # 2. admit: reject what never fits, order the rest
        ws.rank = dict(zip(map(_ID, jobs), range(len(jobs)), strict=True))  # (C-level: every live job)
        ws.ranked = jobs
        t2 = clock()
        sizes = apply_objectives(seen, jobs, self.size(seen, jobs, ws), ws)  # 3. size (then budgets, deadlines)
        ws.want = dict(sizes)
        t3 = clock()
        blocked = self.place(seen, jobs, sizes, ws)  # 4. place: whole gangs, fewest nodes
        t4 = clock()
        for hook in after:  # 5. preempt / reclaim / reserve and backfill
            blocked = hook(snap, blocked, ws)
        t5 = clock()
        plan = ws.plan()  # 6. the controller diffs the plan into actions
        return replace(plan, timings={"snapshot": t1 - t0, "admit": t2 - t1, "size": t3 - t2, "place": t4 - t3,
                                      "after": t5 - t4, "plan": clock() - t5}), ws
