"""`srtf`: shortest remaining time first with oracle durations, a reference line.

Remaining time is `spec.estimate` (the job's true duration at its requested
size, which the workload loaders set only when asked for an oracle) minus the
seconds it has held resources. Preemptive and work-conserving like `tiresias`.
No real scheduler knows durations; this bounds what knowing them is worth.
"""

from __future__ import annotations

import bisect
import math
from itertools import compress
from operator import is_not, itemgetter
from typing import ClassVar

from trainmaster.policies.cycle import Cycle, KeptSizes, place_in_order
from trainmaster.policies.preemption import preempt_lower
from trainmaster.policies.snapshot import JobView, Snapshot

_KEY_ID = itemgetter(2)  # of an order key


def remaining(job: JobView) -> float:
    """Oracle seconds left; infinite (served last, FIFO) when the job has no estimate."""
    if job.spec.estimate is None:
        return math.inf
    return max(0.0, job.spec.estimate - job.runtime)


def order_key(job: JobView) -> tuple[float, float, str]:
    """Shortest remaining time first, then submit time, then id (unique: a total order)."""
    return (remaining(job), job.submit_time, job.id)


def by_remaining(snap: Snapshot) -> list[JobView]:
    return sorted(snap.jobs.values(), key=order_key)


class KeptRemaining:
    """`by_remaining`, with the keys of jobs holding nothing kept sorted across decisions (srtf's state).

    A key reads the view's estimate, runtime, submit time and id; the controller rebuilds a view only when
    its record changes, and a view's runtime grows with time only while it holds tasks (`LiveJobView`), so
    a waiting job's key stays while its view does. Those keys are kept in one sorted list (`line`, moved by
    bisection for the few views that change per decision); the holders' keys are worked out at each
    decision and merged in by one sort (a long sorted run and a short one: about a comparison per job,
    where sorting every key compares each ~log n times: a busy line is 10,000 waiting jobs). The keys end
    with the unique id, so the merged order is `by_remaining`'s. Switch: `KeptRemaining.kept = False` is
    `by_remaining` (the reference).
    """

    kept: ClassVar[bool] = True

    def __init__(self) -> None:
        self.views: dict[str, JobView] = {}
        self.keys: dict[str, tuple[float, float, str] | None] = {}  # None: the view holds tasks
        self.line: list[tuple[float, float, str]] = []  # the keys that are not None, sorted
        self.holding: set[str] = set()  # the jobs whose key is None
        self.served = 0  # keys read from `line` (a counter the replay test reads)

    def __call__(self, snap: Snapshot) -> list[JobView]:
        if not self.kept:
            return by_remaining(snap)
        jobs, views, kept = snap.jobs, self.views, self.keys
        for jid in kept.keys() - jobs.keys():  # (jobs that left: a few per decision)
            self._drop(jid)
            del views[jid]
        for jid in list(compress(jobs, map(is_not, jobs.values(), map(views.get, jobs)))):  # new or changed
            self._drop(jid)
            job = views[jid] = jobs[jid]
            if job.allocation.tasks:
                kept[jid] = None
                self.holding.add(jid)
            else:
                key = kept[jid] = order_key(job)
                bisect.insort(self.line, key)
        self.served += len(self.line)
        keys = self.line + [order_key(jobs[jid]) for jid in self.holding]
        keys.sort()  # (a sorted run and a short one: a merge)
        return list(map(views.__getitem__, map(_KEY_ID, keys)))  # (`views` holds `jobs`' views: a dict, no proxy)

    def _drop(self, jid: str) -> None:
        """Forget `jid`'s key (if any)."""
        if jid not in self.keys:
            return
        key = self.keys.pop(jid)
        if key is None:
            self.holding.discard(jid)
        else:
            line = self.line
            del line[bisect.bisect_left(line, key)]


def make() -> Cycle:
    return Cycle(name="srtf", order=KeptRemaining(), size=KeptSizes(journal=True), place=place_in_order(strict=False),
                 after=(preempt_lower,))
