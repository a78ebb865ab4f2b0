"""The pending jobs in submit order, kept across decisions so a decision's cost follows what changed.

A strict-order decision needs the line in order, the never-fits verdicts and
the head: each decision here costs C-level set operations over the pending ids
plus Python work for the jobs that arrived or left since the previous one,
never a Python pass over every job waiting in line.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from itertools import compress, filterfalse
from operator import attrgetter, is_not, itemgetter
from typing import TYPE_CHECKING

from trainmaster.core.allocation import Allocation
from trainmaster.core.job import JobSpec, Role, TransientUse
from trainmaster.core.resources import Resources
from trainmaster.policies.snapshot import PendingIds, Snapshot, Tail
from trainmaster.policies.workspace import ClusterMemo, never_fits

if TYPE_CHECKING:
    from trainmaster.policies.turns import Turns

_Key = tuple[float, str]  # (submit time, id): `cycle.by_submit_time`'s order
_ID = itemgetter(1)
_SPEC = attrgetter("spec")
# What placing a job's minimum gang depends on: its queue, eligible pool, and per role its resources and range.
Shape = tuple[str, bool, tuple[str, ...], tuple[tuple[Role, Resources, int, int], ...]]


def shape_of(spec: JobSpec) -> Shape:
    """Jobs of one shape fit, or do not fit, in the same free capacity (and never-fit alike)."""
    return (spec.queue, spec.transient is TransientUse.NEVER, spec.gpu_types if spec.min_gpus > 0 else (),
            tuple((role, r.resources, r.min, r.max) for role, r in spec.roles.items()))


class PendingLine:
    """Pending job ids sorted by (submit time, id), with the ids of those that can never fit.

    Declared cross-decision policy state (a `Cycle` field); `sync` brings it in
    step with a snapshot's pending ids.
    """

    __slots__ = ("bad", "by_shape", "held", "ids", "key_of", "keys", "memo", "seen", "shape", "shaped", "shaped_at",
                 "specs", "turns", "version")

    def __init__(self) -> None:
        self.keys: list[_Key] = []
        self.ids: list[str] = []  # the ids of `keys`, in the same order
        self.key_of: dict[str, _Key] = {}
        self.bad: set[str] = set()  # members with a never-fits verdict
        self.memo: ClusterMemo | None = None  # the cluster memo the verdicts come from
        self.shape: dict[str, Shape] = {}  # member id -> its shape
        self.by_shape: dict[Shape, list[_Key]] = {}  # the line split by shape, each part in line order
        self.specs: dict[str, JobSpec] = {}  # the specs the shapes were taken from (`reshape`)
        self.shaped = False  # shapes are kept only once a decision asked for them (`reshape`)
        self.shaped_at: tuple[object, int] | None = None  # (origin, version) of the `PendingIds` last shaped at
        self.seen: tuple[object, int] | None = None  # (origin, version) of the `PendingIds` last synced to
        self.held = QueueHeld()  # what the active jobs hold per queue (drf's fill by shape reads it)
        self.version = 0  # changes whenever `ids` does (a `Tail` reads the ids while they are unchanged)
        self.turns: Turns | None = None  # drf's failed turns at the last decision (`turns.Turns`)

    def sync(self, snap: Snapshot, pending: Sequence[str], memo: ClusterMemo) -> list[str]:
        """Bring the line in step with `pending` (the snapshot's pending ids); the ids in order (the line's own
        list, kept across decisions: read it, never change it)."""
        key_of = self.key_of
        if isinstance(pending, PendingIds) and self.seen == (pending.origin, pending.version - 1):
            gone = key_of.keys() & pending.left  # what changed since the ids synced to last
            new: set[str] | frozenset[str] = {jid for jid in pending.joined if jid not in key_of}
        else:
            now = set(pending)
            gone = key_of.keys() - now
            new = now - key_of.keys()
        self.seen = (pending.origin, pending.version) if isinstance(pending, PendingIds) else None
        if gone or new:
            self.version += 1
        if gone:
            dropped = set(map(key_of.pop, gone))
            k = len(dropped)
            if dropped == set(self.keys[:k]):  # the front of the line left (strict order places a prefix)
                del self.keys[:k]
                del self.ids[:k]
            elif k <= 8:  # a few from the middle (drf places past jobs that wait): cut them out, no rebuild
                keys, ids = self.keys, self.ids
                for key in sorted(dropped, reverse=True):
                    at = bisect.bisect_left(keys, key)
                    del keys[at]
                    del ids[at]
            else:
                self.keys = list(filterfalse(dropped.__contains__, self.keys))
                self.ids = list(map(_ID, self.keys))
            self.bad -= gone
            if self.shaped:
                self._drop_shapes(gone, dropped)
        if memo is not self.memo:  # another cluster: every verdict again
            self.memo = memo
            self.bad = {jid for jid in key_of if self._never(snap, jid, memo)}
        if new:
            jobs = snap.jobs
            added = sorted((jobs[jid].submit_time, jid) for jid in new)
            for key in added:
                key_of[key[1]] = key
                if self._never(snap, key[1], memo):
                    self.bad.add(key[1])
                if self.shaped:
                    spec = self.specs[key[1]] = jobs[key[1]].spec
                    shape = self.shape[key[1]] = shape_of(spec)
                    part = self.by_shape.setdefault(shape, [])
                    if part and key < part[-1]:
                        bisect.insort(part, key)
                    else:
                        part.append(key)
            keys = self.keys
            if not keys or added[0] >= keys[-1]:
                keys.extend(added)  # arrivals join the back of the line (the common case)
                self.ids.extend(map(_ID, added))
            else:
                if len(added) <= 8:
                    for key in added:
                        bisect.insort(keys, key)
                else:
                    keys.extend(added)
                    keys.sort()
                self.ids = list(map(_ID, keys))
        return self.ids

    def reshape(self, snap: Snapshot, ids: list[str]) -> None:
        """Shapes again if a pending job's spec changed since it joined (`Controller.update`): checks only the
        jobs the snapshot's journal says changed when it follows the snapshot last shaped, else every job
        (C-level)."""
        jobs, pending = snap.jobs, snap.pending_ids
        stamp = None
        if isinstance(pending, PendingIds):
            stamp = (pending.origin, pending.version)
            if self.shaped and pending.changed is not None and self.shaped_at == (pending.origin, pending.version - 1):
                kept = self.specs
                if all(jobs[jid].spec is kept[jid] for jid in pending.changed if jid in kept):
                    self.shaped_at = stamp
                    return
        self.shaped_at = stamp
        specs = dict(zip(ids, map(_SPEC, map(jobs.__getitem__, ids)), strict=True))
        if specs == self.specs and self.shaped:
            return
        self.shaped = True  # from now on `sync` keeps the shapes up to date
        self.specs = specs
        self.shape = {jid: shape_of(spec) for jid, spec in specs.items()}
        self.by_shape = {}
        for key in self.keys:
            self.by_shape.setdefault(self.shape[key[1]], []).append(key)

    def _drop_shapes(self, gone: set[str], dropped: set[_Key]) -> None:
        touched: dict[Shape, int] = {}
        for jid in gone:
            del self.specs[jid]
            shape = self.shape.pop(jid)
            touched[shape] = touched.get(shape, 0) + 1
        for shape, k in touched.items():
            part = self.by_shape[shape]
            if k == len(part):
                del self.by_shape[shape]
            elif dropped.issuperset(part[:k]):
                del part[:k]
            else:
                self.by_shape[shape] = list(filterfalse(dropped.__contains__, part))

    @staticmethod
    def _never(snap: Snapshot, jid: str, memo: ClusterMemo) -> bool:
        reason = memo.never.get(jid, _UNSEEN)
        if reason is _UNSEEN:
            reason = memo.never[jid] = never_fits(snap.jobs[jid].spec, snap, memo)
        return reason is not None

    def rejected(self, ids: list[str], memo: ClusterMemo) -> dict[str, str]:
        """Why each pending job that can never fit cannot, in line order."""
        bad = self.bad
        return {jid: memo.never[jid] or "" for jid in sorted(bad, key=self.key_of.__getitem__)} if bad else {}

    def tail(self, snap: Snapshot, ids: list[str], i: int, memo: ClusterMemo) -> Tail | None:
        """`behind` the head `ids[i]` (`ids` as `sync` returned them)."""
        return self.behind(snap, ids[i], self.key_of[ids[i]], memo)

    def behind(self, snap: Snapshot, head: str, key: _Key, memo: ClusterMemo) -> Tail | None:
        """Every pending job after `key` (`head`'s key; `head` pending or not) that can fit some day, as one
        segment; None for a snapshot whose pending ids may disagree with its views' states (built by hand)."""
        if snap.pending_ids is not None and not isinstance(snap.pending_ids, PendingIds):
            return None
        at = bisect.bisect_right(self.keys, key)
        behind = sum(1 for jid in self.bad if self.key_of[jid] > key) if self.bad else 0
        return Tail(head, key, snap.jobs, memo.never, len(self.ids) - at - behind, (self.ids, at, self))


_UNSEEN = "?"  # `ClusterMemo.never` has no verdict yet (a verdict is None or a non-empty reason)


class PendingDemand:
    """What the pending jobs' minimum gangs take in all, kept across decisions (tiresias' pending pass).

    Per decision: C-level passes over the pending ids, and Python arithmetic
    only for the jobs that joined or left (or whose spec changed).
    """

    __slots__ = ("need", "seen", "total")

    def __init__(self) -> None:
        self.seen: dict[str, int] = {}  # pending id -> id() of the spec its need was taken from
        self.need: dict[str, tuple[JobSpec, Resources]] = {}  # (the spec is kept, so its id() stays unique)
        self.total = Resources()

    def of(self, snap: Snapshot, pending: Sequence[str]) -> Resources:
        """The sum of `spec.min_resources` over `pending` (integers: any order sums alike)."""
        jobs = snap.jobs
        specs = list(map(_SPEC, map(jobs.__getitem__, pending)))
        now = dict(zip(pending, map(id, specs), strict=True))
        if now == self.seen:
            return self.total
        total, need = self.total, self.need
        for jid in self.seen.keys() - now.keys():
            total = total - need.pop(jid)[1]
        for jid, _ in now.items() - self.seen.items():  # joined, or its spec changed
            if jid in need:
                total = total - need[jid][1]
            spec = jobs[jid].spec
            need[jid] = (spec, spec.min_resources)
            total = total + need[jid][1]
        self.seen, self.total = now, total
        return total


class QueueHeld:
    """What the active jobs hold per queue, kept across decisions (drf's shares at a decision's start).

    Per decision: a C-level pass over the held allocations, and Python arithmetic
    only for the jobs whose allocation changed or whose view the snapshot's journal
    names (`PendingIds.changed`: the spec may have changed); without the journal,
    every job's spec is compared.
    """

    __slots__ = ("allocs", "by_queue", "stamp", "took")

    def __init__(self) -> None:
        self.allocs: dict[str, int] = {}  # job id -> id() of the allocation it was taken from
        self.took: dict[str, tuple[Allocation, JobSpec, Resources]] = {}  # (both kept, so their id()s stay unique)
        self.by_queue: dict[str, Resources] = {}
        self.stamp: tuple[object, int] | None = None  # (origin, version) of the snapshot last read

    def of(self, snap: Snapshot, allocations: Mapping[str, Allocation]) -> dict[str, Resources]:
        """Queue -> the sum of `alloc.resources(spec)` over `allocations` (integers: any order sums alike)."""
        jobs, pending, took = snap.jobs, snap.pending_ids, self.took
        stamp = (pending.origin, pending.version) if isinstance(pending, PendingIds) else None
        allocs = dict(zip(allocations, map(id, allocations.values()), strict=True))
        dirty = {jid for jid, _ in allocs.items() - self.allocs.items()}  # new, or another allocation
        if isinstance(pending, PendingIds) and pending.changed is not None and self.stamp == (pending.origin,
                                                                                              pending.version - 1):
            dirty.update(filter(allocs.__contains__, pending.changed))
        else:
            dirty.update(compress(allocations, map(is_not, map(_SPEC, map(jobs.__getitem__, allocations)),
                                                   (took[jid][1] if jid in took else None for jid in allocations))))
        by_queue = self.by_queue
        for jid in self.allocs.keys() - allocs.keys():
            _, spec, res = took.pop(jid)
            by_queue[spec.queue] = by_queue[spec.queue] - res
        for jid in dirty:
            if jid in took:
                _, spec, res = took[jid]
                by_queue[spec.queue] = by_queue[spec.queue] - res
            alloc, spec = allocations[jid], jobs[jid].spec
            res = alloc.resources(spec)
            took[jid] = (alloc, spec, res)
            by_queue[spec.queue] = by_queue.get(spec.queue, Resources()) + res
        self.allocs, self.stamp = allocs, stamp
        return dict(by_queue)
