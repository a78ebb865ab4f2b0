"""Queue-aware placement helpers: the within-queue order and placing a gang within hard quotas.

The accounting itself (usage per queue, quotas, fair share) is `queuebook.QueueBook`,
one per decision in `Workspace.book`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from trainmaster.core.allocation import Allocation, Placement
from trainmaster.core.job import JobKind, Role
from trainmaster.core.resources import Resources
from trainmaster.policies.snapshot import JobView, Snapshot
from trainmaster.policies.workspace import Workspace, demand


def job_order_key(job: JobView) -> tuple[int, int, float, str]:
    """Within a queue: services first, then higher priority, then earlier submit."""
    return (0 if job.spec.kind is JobKind.SERVICE else 1, -job.spec.priority, job.submit_time, job.id)


def by_priority(snap: Snapshot) -> list[JobView]:
    """The base order of queue-aware presets (fair share across queues is applied while placing)."""
    return sorted(snap.jobs.values(), key=job_order_key)


def try_place(ws: Workspace, job: JobView, counts: Mapping[Role, int],
              need: Resources | None = None) -> Allocation | str | None:
    """Place `job` with `counts` if it fits and keeps hard quotas; the quota problem, or None when it does not fit.

    Without queue definitions there are no quotas and the book is never built. `need`: `demand(job.spec,
    counts)` where the caller has it already (preemption asks it of every claimant first), else computed here.
    """
    held = ws.allocations.get(job.id)
    queues = ws.queued
    if not queues and (held is None or not held.tasks) and not job.allocation.tasks:
        # (no quota, nothing held, nowhere it runs now: `choose` is `find`, whose first step is the fit test
        # below: one `demand` and one test per placement, not two; a busy LAS pass places thousands this way)
        return ws.start(job, counts, need)
    if need is None:
        need = demand(job.spec, counts)
    mine = held.resources(job.spec) if held else None  # (None: it holds nothing here, no zero added on)
    if queues and ws.book.hard_quota_blocks(job, need if mine is None else need - mine):
        return ws.book.quota_problem(job, held, Allocation.of(Placement(r, "") for r, n in counts.items()
                                                              for _ in range(n))) or "above a hard quota"
    if not need.fits_in(ws.total_free if mine is None else ws.total_free + mine):
        return None
    alloc = ws.choose(job, counts)
    if alloc is None:
        return None
    problem = ws.book.quota_problem(job, held, alloc) if queues else None
    if problem and len(ws.memo.traits.gpu_types) > 1 and job.spec.min_gpus:
        alloc, problem = _on_other_types(ws, job, counts, held, alloc, problem)
    if problem:
        return problem
    ws.assign(job, alloc)
    return alloc


def _on_other_types(ws: Workspace, job: JobView, counts: Mapping[Role, int], held: Allocation | None,
                    alloc: Allocation, problem: str) -> tuple[Allocation, str | None]:
    """A GPU type's quota refused the placement: `gpuTypes` is a preference, so try the job's other types."""
    cluster = ws.snap.cluster
    used = {cluster.node(n).gpu_type for n in alloc.nodes if n in cluster}
    allowed = job.spec.require_gpu_types or tuple(sorted(ws.memo.traits.gpu_types))
    others = tuple(t for t in allowed if t not in used)
    if not others:
        return alloc, problem
    other = ws.choose(replace(job, spec=replace(job.spec, require_gpu_types=others)), counts)
    if other is None or ws.book.quota_problem(job, held, other):
        return alloc, problem
    return other, None
