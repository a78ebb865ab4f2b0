"""Batch-size adaptation (Pollux): each adaptive job runs at the global batch with the most goodput.

The last phase of the `trainmaster` preset, after the allocations are decided:
every job that opted in (`spec.adaptiveBatch`) and holds resources in the plan
gets the batch that maximizes its goodput on that allocation
(`JobModel.best_batch`: fitted speed x statistical efficiency from its
gradient noise scale, `models/goodput.py`). Until a fitted speed law (its own
or its type's) and a noise scale exist it runs at its base batch. The engine hands the batch to the
job when it (re)starts (`TM_BATCH_SIZE`); a running job keeps its batch until
its allocation changes, or switches in place (`Plan.rebatch`, no restart, as
Pollux's jobs do) once another batch promises more goodput, `REBATCH_GAIN`
more to go back to the batch it last left (its noise scale grows as it
trains; `trainmaster.AdaptiveCycle._switches`). GPU counts
follow goodput too (`Optimus(goodput=True)`): at a fixed batch a job's speed
stops growing once its local batch gets small (yolov3 at 64 peaks at 4 GPUs),
while at the best batch per size it keeps growing to 64 (3x), so sizing on the
fixed-batch speed kept the longest jobs small on an idle cluster. Sizing on
goodput alone was worse (+8-11% at load 0.5): the greedy stopped at the node
boundary, where goodput dips, and jumped to sizes its law was never measured
near; the node jump and Pollux's 2x exploration pace are what make it pay.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import partial
from itertools import repeat
from operator import attrgetter, is_not

from trainmaster.core.allocation import Allocation
from trainmaster.core.job import Role
from trainmaster.policies.snapshot import Plan, Snapshot

_SPEC, _ADAPTIVE = attrgetter("spec"), attrgetter("adaptive_batch")


def batch_for(snap: Snapshot, job_id: str, alloc: Allocation) -> int | None:
    """The batch an adaptive job should start with on `alloc`; None for jobs that do not adapt."""
    job = snap.jobs.get(job_id)
    bounds = job.spec.adaptive_batch if job is not None else None
    if job is None or bounds is None or not alloc:
        return None
    model = snap.models.get(job_id)
    workers, nodes = _workers_nodes(alloc)
    best = model.best_batch(workers, 0, nodes) if model is not None else None
    return bounds.base if best is None else best


def _workers_nodes(alloc: Allocation) -> tuple[int, int]:
    if alloc.on_one_node:  # (1 below, with or without workers)
        return alloc.count(Role.WORKER), 1
    return alloc.count(Role.WORKER), len({t.node for t in alloc.tasks if t.role is Role.WORKER}) or 1


def switch_gain(snap: Snapshot, job_id: str, alloc: Allocation, old: int, new: int) -> float:
    """Predicted goodput at batch `new` over that at `old` on `alloc` (1 when the job has no goodput model)."""
    model = snap.models.get(job_id)
    if model is None or model.goodput is None:
        return 1.0
    workers, nodes = _workers_nodes(alloc)
    c = model.config(workers, 0, nodes)
    before = model.goodput.goodput(c, old)
    return model.goodput.goodput(c, new) / before if before > 0 else 1.0


def any_adaptive(snap: Snapshot, ids: Iterable[str]) -> bool:
    """Whether any of these jobs adapts its batch: one pass over their specs, without `batch_for`'s call per
    job (on a fixed-batch trace `choose_batches` finds nothing at every decision), in C-level passes (no
    generator frame resumed per job: a busy plan's 3,000)."""
    views = filter(partial(is_not, None), map(snap.jobs.get, ids))
    return any(map(is_not, map(_ADAPTIVE, map(_SPEC, views)), repeat(None)))


def choose_batches(snap: Snapshot, plan: Plan) -> dict[str, int]:
    """Phase 7: the batch of every adaptive job the plan runs (module doc)."""
    out: dict[str, int] = {}
    for jid, alloc in plan.allocations.items():
        batch = batch_for(snap, jid, alloc)
        if batch is not None:
            out[jid] = batch
    return out
