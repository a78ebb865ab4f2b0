"""Elastic jobs as in PaddlePaddle EDL: start at `min`, fill idle capacity, yield it back.

Phase 3 (`shrink_for_pending`): running elastic jobs keep their size unless
pending jobs (services first) need the room; then the most fulfilled job gives
up one replica at a time, never below `min`. Fulfillment is `(cur-min)/(max-min)`.
Phase 5 (`grow_into_idle`): the least fulfilled elastic job gets one more
replica at a time while the cluster's load stays at or below the load line
(EDL's default 0.97 leaves a little room for services to start at once).
Both work on aggregate capacity; placement (phase 4) is what finally decides.
"""

from __future__ import annotations

from trainmaster.core.job import JobKind, Role
from trainmaster.core.resources import Resources
from trainmaster.policies.cycle import AfterHook, SizeHook, Sizes, current_or_min
from trainmaster.policies.queues import try_place
from trainmaster.policies.snapshot import JobView, Snapshot
from trainmaster.policies.workspace import Workspace

LOAD_LINE = 0.97


def fulfillment(job: JobView, counts: dict[Role, int]) -> float:
    """How far an elastic job is from its minimum towards its maximum, 0..1 over its elastic roles."""
    spans = [(counts.get(r, 0) - s.min, s.max - s.min) for r, s in job.spec.roles.items() if s.elastic]
    if not spans:
        return 1.0
    return sum(cur for cur, _ in spans) / sum(span for _, span in spans)


def _elastic_role(job: JobView, counts: dict[Role, int], *, grow: bool) -> Role | None:
    """The role to add to (grow) or take from (shrink): the least (most) fulfilled elastic role."""
    roles = [(r, s) for r, s in job.spec.roles.items() if s.elastic
             and (counts.get(r, 0) < s.max if grow else counts.get(r, 0) > s.min)]
    if not roles:
        return None
    key = [((counts.get(r, 0) - s.min) / (s.max - s.min), r.value, r) for r, s in roles]
    return (min(key) if grow else max(key))[2]


def _shrink_one(elastic: list[JobView], sizes: Sizes) -> Resources | None:
    """Take one replica from the most fulfilled elastic job; what it frees, or None when all are at min."""
    donors = [e for e in elastic if _elastic_role(e, sizes[e.id], grow=False)]
    if not donors:
        return None
    donor = max(donors, key=lambda e: (fulfillment(e, sizes[e.id]), e.id))
    role = _elastic_role(donor, sizes[donor.id], grow=False)
    assert role is not None
    sizes[donor.id][role] -= 1
    return donor.spec.roles[role].resources


def shrink_for_pending(strict: bool = True, load_line: float = LOAD_LINE) -> SizeHook:
    """Phase 3: current size for running jobs, `min` for pending; shrink elastic jobs to make room.

    Elastic jobs also give back what lifts the load above the load line (a
    service that just took the headroom), so the next service starts at once.
    """

    def size(snap: Snapshot, jobs: list[JobView], ws: Workspace) -> Sizes:
        sizes = current_or_min(snap, jobs, ws)
        elastic = [j for j in jobs if j.active and j.spec.elastic and j.spec.kind is JobKind.TRAINING]
        if not elastic:  # nothing to shrink: the passes below would only count what fits (O(pending) for naught)
            return sizes
        book = ws.book
        free = ws.total_free
        pending = sorted((j for j in jobs if j.pending),
                         key=lambda j: (j.spec.kind is not JobKind.SERVICE, *book.fair_key(j)))
        spare = Resources()  # what shrinking every elastic job to its min would free
        for e in elastic:
            for r, s in e.spec.roles.items():
                spare = spare + s.resources * (sizes[e.id][r] - s.min)
        for job in pending:
            need = job.spec.min_resources
            if book.never_within_quota(job) or book.hard_quota_blocks(job, need):
                continue  # quota, not capacity, holds it back: shrinking others would not help
            if need.fits_in(free):
                free = free - need
                continue
            if not need.fits_in(free + spare):
                if strict:
                    break  # the head cannot start even with every elastic job at min: nothing to gain
                continue
            while not need.fits_in(free):
                freed = _shrink_one(elastic, sizes)
                assert freed is not None  # `spare` covered the need
                free, spare = free + freed, spare - freed
            free = free - need
        total = snap.cluster.total
        while (total - free).dominant_share(total) > load_line:
            freed = _shrink_one(elastic, sizes)
            if freed is None:
                break
            free = free + freed
        return sizes

    return size


def model_gain(snap: Snapshot, job: JobView, counts: dict[Role, int], role: Role) -> float | None:
    """Optimus' completion-rate gain `1/T_after - 1/T_before` of one more `role` replica, per unit of its
    dominant share; None when the job has no fitted model that predicts (then fulfillment decides)."""
    model = snap.models.get(job.id)
    if model is None:
        return None
    w, p = counts.get(Role.WORKER, 0), counts.get(Role.PS, 0)
    nodes = max(1, len(job.allocation.nodes))
    before = model.remaining_time(w, p, nodes)
    after = model.remaining_time(w + (role is Role.WORKER), p + (role is Role.PS), nodes)
    if before is None or after is None or before <= 0:
        return None
    share = job.spec.roles[role].resources.dominant_share(snap.cluster.total) or 1.0
    return float((1.0 / max(after, 1e-9) - 1.0 / before) / share)


def grow_into_idle(load_line: float = LOAD_LINE, *, use_models: bool = False) -> AfterHook:
    """Phase 5, last: give idle capacity to elastic jobs, least fulfilled first, up to the load line.

    `use_models`: jobs whose fitted model predicts go first, by Optimus' marginal
    completion-rate gain, and stop growing where one more replica gains nothing;
    jobs without a predicting model follow by least fulfillment.
    """

    def key(snap: Snapshot, job: JobView, counts: dict[Role, int]) -> tuple[int, float, float, str]:
        role = _elastic_role(job, counts, grow=True)
        gain = model_gain(snap, job, counts, role) if use_models and role is not None else None
        if gain is not None:
            return (0, -gain, job.submit_time, job.id)
        return (1, fulfillment(job, counts), job.submit_time, job.id)

    def grow(snap: Snapshot, blocked: list[JobView], ws: Workspace) -> list[JobView]:
        total = snap.cluster.total
        candidates = [j for j in snap.jobs.values()
                      if j.spec.elastic and j.spec.kind is JobKind.TRAINING and ws.allocations.get(j.id)]
        counts = {j.id: {r: ws.allocations[j.id].count(r) for r in j.spec.roles} for j in candidates}
        while candidates:
            job = min(candidates, key=lambda j: key(snap, j, counts[j.id]))
            role = _elastic_role(job, counts[job.id], grow=True)
            if role is not None and use_models:
                gain = model_gain(snap, job, counts[job.id], role)
                if gain is not None and gain <= 0:
                    candidates.remove(job)  # its model says one more replica would not speed it up
                    continue
            used = total - ws.total_free
            if role is None or not (used + job.spec.roles[role].resources).dominant_share(total) <= load_line:
                candidates.remove(job)
                continue
            want = dict(counts[job.id])
            want[role] += 1
            result = try_place(ws, job, want)
            if result is None or isinstance(result, str):
                candidates.remove(job)
                continue
            counts[job.id] = want
        return blocked

    return grow
