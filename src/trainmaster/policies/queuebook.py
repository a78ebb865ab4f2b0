"""Queue accounting for one decision: usage per queue (and its ancestors), quota checks, fair share.

`Snapshot.queues` maps names to `core.queue.QueueSpec`; when it is empty every
job shares one implicit queue without a quota. The Workspace holds one book per
decision and keeps it in step with every assign and release.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from trainmaster.core.allocation import Allocation
from trainmaster.core.queue import UNLIMITED, QueueSpec, ancestry
from trainmaster.core.resources import Resources
from trainmaster.policies.snapshot import JobView, Snapshot

IMPLICIT = ""  # the one queue of a cluster without queue definitions


def queue_name(queues: Mapping[str, QueueSpec], job: JobView) -> str:
    """The queue a job counts in: its own when defined, else the implicit one."""
    return job.spec.queue if job.spec.queue in queues else IMPLICIT


def _fields(r: Resources) -> tuple[int, int, int]:
    return (r.cpu, r.memory, r.gpu)


class QueueBook:
    """Resources and GPUs per GPU type that each queue (counting its children) holds in a workspace."""

    def __init__(self, snap: Snapshot, allocations: Mapping[str, Allocation]) -> None:
        self.snap = snap
        self.queues: Mapping[str, QueueSpec] = snap.queues
        self.total = snap.cluster.total
        self.usage: dict[str, Resources] = {}
        self.by_type: dict[str, Counter[str]] = {}
        self._types = {n.name: n.gpu_type for n in snap.cluster.nodes}
        for jid, alloc in allocations.items():
            job = snap.jobs.get(jid)
            if job is not None and alloc:
                self._add(job, alloc, +1)

    def copy(self, snap: Snapshot) -> QueueBook:
        """This book for `snap` (same cluster and queues), its counts copied: the copy's changes stay its own."""
        out = QueueBook.__new__(QueueBook)
        out.snap, out.queues, out.total, out._types = snap, snap.queues, self.total, self._types
        out.usage = dict(self.usage)
        out.by_type = {q: Counter(c) for q, c in self.by_type.items()}
        return out

    # -- accounting ----------------------------------------------------------
    def queue_of(self, job: JobView) -> str:
        return queue_name(self.queues, job)

    def chain(self, job: JobView) -> list[QueueSpec]:
        """The job's queue and its ancestors (empty without queue definitions)."""
        return ancestry(self.queues, job.spec.queue) if self.queues else []

    def _gpus_by_type(self, job: JobView, alloc: Allocation) -> Counter[str]:
        out: Counter[str] = Counter()
        for (role, node), n in alloc.counts.items():
            gpu_type = self._types.get(node)
            if gpu_type:
                out[gpu_type] += job.spec.roles[role].resources.gpu * n
        return out

    def _add(self, job: JobView, alloc: Allocation, sign: int) -> None:
        res = alloc.resources(job.spec)
        types = self._gpus_by_type(job, alloc)
        for q in [*(s.name for s in self.chain(job)), *([] if self.queues else [IMPLICIT])]:
            self.usage[q] = self.usage.get(q, Resources()) + (res if sign > 0 else Resources() - res)
            counter = self.by_type.setdefault(q, Counter())
            for t, n in types.items():
                counter[t] += sign * n

    def swap(self, job: JobView, old: Allocation | None, new: Allocation | None) -> None:
        if old:
            self._add(job, old, -1)
        if new:
            self._add(job, new, +1)

    # -- quotas --------------------------------------------------------------
    def quota_problem(self, job: JobView, old: Allocation | None, new: Allocation,
                      *, hard_only: bool = True) -> str | None:
        """Why moving `job` from `old` to `new` breaks a quota, or None.

        `hard_only`: check only queues that may not borrow (a borrowing queue may
        exceed its quota on idle capacity); otherwise check every quota.
        """
        add = new.resources(job.spec) - (old.resources(job.spec) if old else Resources())
        add_types = self._gpus_by_type(job, new)
        if old:
            add_types.subtract(self._gpus_by_type(job, old))
        for q in self.chain(job):
            if hard_only and q.borrowing:
                continue
            used = self.usage.get(q.name, Resources())
            if q.quota is not None and not (used + add).fits_in(q.quota):
                return (f"queue {q.name} would use {used + add}, above its quota {q.quota_text()}"
                        + (" (borrowing off)" if not q.borrowing else ""))
            for gpu_type, limit in q.gpu_quota:
                now_used = self.by_type.get(q.name, Counter())[gpu_type]
                if now_used + add_types[gpu_type] > limit:
                    return f"queue {q.name} would use {now_used + add_types[gpu_type]} {gpu_type} GPUs, quota {limit}"
        return None

    def never_within_quota(self, job: JobView) -> str | None:
        """Why the job's minimum exceeds a non-borrowing queue's whole quota (it can never start), or None."""
        if not self.queues:
            return None
        need = job.spec.min_resources
        for q in self.chain(job):
            if not q.borrowing and q.quota is not None and not need.fits_in(q.quota):
                return f"needs {need} at minimum, more than queue {q.name}'s quota {q.quota_text()} (borrowing off)"
        return None

    def hard_quota_blocks(self, job: JobView, need: Resources) -> bool:
        """Whether `need` more would push a non-borrowing queue of the job above its quota."""
        return any(not q.borrowing and q.quota is not None
                   and not (self.usage.get(q.name, Resources()) + need).fits_in(q.quota) for q in self.chain(job))

    def within_quota(self, job: JobView, need: Resources) -> bool:
        """Whether `need` more keeps the job's queue and its ancestors within their quotas (a reclaim claim)."""
        chain = self.chain(job)
        return bool(chain) and all(
            q.quota is None or (self.usage.get(q.name, Resources()) + need).fits_in(q.quota) for q in chain)

    def lendable(self, victim: JobView, amount: Resources) -> bool:
        """Whether taking `amount` from the victim's queues leaves each at or above its quota (borrowed part only)."""
        chain = self.chain(victim)
        if not chain:
            return False
        for q in chain:
            if q.quota is None:
                return False  # no quota: nothing it holds counts as borrowed
            left = self.usage.get(q.name, Resources()) - amount
            for limit, rest, taken in zip(_fields(q.quota), _fields(left), _fields(amount), strict=True):
                if taken > 0 and limit < UNLIMITED and rest < limit:
                    return False
        return True

    # -- fair share ------------------------------------------------------------
    def share(self, name: str, extra: Resources | None = None) -> float:
        """Weighted dominant share (DRF across queues by weight), after adding `extra`."""
        spec = self.queues.get(name)
        weight = spec.weight if spec else 1.0
        used = self.usage.get(name, Resources())
        return (used + extra if extra else used).dominant_share(self.total) / weight

    def fair_key(self, job: JobView) -> tuple[float, ...]:
        """Hierarchical DRF: compare top-level shares first, then down to the job's queue.

        Shares count the job's own minimum as if placed (progressive filling):
        a queue is not served a large job that would carry it further past its
        weighted share than a smaller job would carry another queue.
        """
        chain = self.chain(job)
        if not chain:
            return ()
        need = job.spec.min_resources
        return tuple(x for q in reversed(chain) for x in (-q.priority, self.share(q.name, need)))


class HeldUsage:
    """What the held allocations add to each queue, kept across decisions (`ClusterMemo.usage`).

    A decision's book is a copy of a base book brought in step with the workspace's allocations: Python
    arithmetic only for the jobs whose allocation or spec changed since (a fresh `QueueBook` adds every
    running job, every decision). Integer sums: any order adds alike; a queue whose jobs all left keeps a
    zero entry, which every reader takes as an absent one (`usage.get`, `by_type` counters).
    """

    shortcut = True  # False: every book built from every allocation (the reference the tests replay against)

    def __init__(self) -> None:
        self.base: QueueBook | None = None
        self.seen: dict[str, tuple[int, int]] = {}  # job id -> id() of the allocation and spec the base added
        self.took: dict[str, tuple[Allocation, JobView]] = {}  # (both kept, so their id()s stay unique)

    def book(self, snap: Snapshot, allocations: Mapping[str, Allocation]) -> QueueBook:
        """`QueueBook(snap, allocations)`, from the base book and the allocations that changed."""
        if not self.shortcut:
            return QueueBook(snap, allocations)
        base, jobs = self.base, snap.jobs
        if base is None or base.snap.cluster is not snap.cluster \
                or (base.queues is not snap.queues and base.queues != snap.queues):
            base = self.base = QueueBook(snap, {})
            self.seen, self.took = {}, {}
        now = {jid: (id(alloc), id(jobs[jid].spec)) for jid, alloc in allocations.items() if alloc and jid in jobs}
        if now != self.seen:
            took = self.took
            for jid in self.seen.keys() - now.keys():
                alloc, job = took.pop(jid)
                base._add(job, alloc, -1)
            for jid, _ in now.items() - self.seen.items():  # new, or its allocation or spec changed
                if jid in took:
                    alloc, job = took[jid]
                    base._add(job, alloc, -1)
                alloc, job = allocations[jid], jobs[jid]
                base._add(job, alloc, +1)
                took[jid] = (alloc, job)
            self.seen = now
        base.snap = snap  # (the latest only: an older snapshot is not kept alive by the memo)
        return base.copy(snap)
