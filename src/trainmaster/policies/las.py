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

from collections.abc import Iterator

from trainmaster.core.job import JobKind
from trainmaster.policies.preemption import RANK, VictimRule, preempt_with
from trainmaster.policies.queues import job_order_key
from trainmaster.policies.snapshot import JobView, Snapshot
from trainmaster.policies.tiresias import STARVATION, THRESHOLD, TiresiasOrder
from trainmaster.policies.workspace import Workspace


def _class_key(job: JobView) -> tuple[int, int]:
    return job_order_key(job)[:2]  # services first, then higher priority


class LasOrder:
    """Order hook: the queue-aware class first, then Tiresias' attained-service queues (module doc)."""

    def __init__(self, threshold: float = THRESHOLD, starvation: float | None = STARVATION) -> None:
        self.ranks = TiresiasOrder(threshold, starvation)

    def __call__(self, snap: Snapshot) -> list[JobView]:
        return sorted(self.ranks(snap), key=_class_key)  # stable: LAS order within a class


class SameClassLowerRank(VictimRule):
    """Victims: training jobs of the claimant's queue and priority ranked after it, lowest ranked first."""

    put_back = True
    quota_aware = True

    def __init__(self, ws: Workspace) -> None:
        self.ws = ws
        self.last = len(ws.rank)

    def _rank(self, job: JobView) -> int:
        return self.ws.rank.get(job.id, self.last)

    def claimants(self, blocked: list[JobView]) -> list[JobView]:
        return sorted(blocked, key=self._rank)

    def candidates(self, claimant: JobView) -> Iterator[tuple[JobView, str]]:
        ws = self.ws
        if claimant.spec.kind is not JobKind.TRAINING:
            return
        book, mine, rank = ws.book, ws.book.queue_of(claimant), self._rank(claimant)
        victims = [ws.snap.jobs[jid] for jid, alloc in ws.allocations.items() if alloc and jid in ws.snap.jobs]
        victims = [v for v in victims if v.spec.kind is JobKind.TRAINING and v.spec.priority == claimant.spec.priority
                   and self._rank(v) > rank and book.queue_of(v) == mine]
        for victim in sorted(victims, key=self._rank, reverse=True):
            if ws.allocations.get(victim.id):
                yield victim, RANK


def las_preempt(snap: Snapshot, blocked: list[JobView], ws: Workspace) -> list[JobView]:
    """Phase 5: a blocked job evicts lower-ranked jobs of its own class (module doc)."""
    if not blocked:
        return []
    return preempt_with(snap, blocked, ws, SameClassLowerRank(ws))
