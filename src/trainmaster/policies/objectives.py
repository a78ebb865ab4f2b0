"""Per-job objectives at sizing: fastest within a `budget`, cheapest meeting a `deadline`.

Runs after any preset's size phase (`Cycle.run`) on the jobs that set either
field and have a fitted model (presets that learn: `uses_models`); other jobs
keep the size the preset chose, and the phase costs one attribute test per job.

For an elastic job it looks at every worker count k from the role's minimum to
the most the preset or the free GPUs allow (PS counts stay as sized):

- time left `T(k)` from the job's model (`JobModel.remaining_time`);
- dollars left `C(k) = T(k) * k * g * price`, with `g` GPUs per worker and
  `price` the per-GPU-second price of the nodes it holds now (else of the
  cheapest eligible node: where `scoring.PerDollar` sends a budget job);
- budget left: `budget - spent`, spent being the job's bill so far as the
  controller's cost meter has it (`JobView.spent`, `core.cost`);
- time to the deadline: `submit + deadline - now`.

With a deadline: the cheapest k that meets it (and fits the budget left, if
any); with only a budget: the fastest k that fits it. When no k meets the
deadline the job runs at its fastest and the plan's note for it says by how
much it is predicted to miss; when no k fits the budget it runs at its minimum
and says so. A fixed-size job cannot trade: only placement (per dollar) serves it.
"""

from __future__ import annotations

import math

from trainmaster.core.job import JobSpec, Role
from trainmaster.models.book import JobModel
from trainmaster.policies.snapshot import JobView, Snapshot
from trainmaster.policies.workspace import Workspace

Sizes = dict[str, dict[Role, int]]


def price_per_gpu_s(job: JobView, snap: Snapshot, ws: Workspace) -> float:
    """Dollars per GPU-second the job pays where it runs now, else on the cheapest eligible GPU node."""
    cluster = snap.cluster
    held = [cluster.node(n) for n in job.allocation.nodes if n in cluster]
    nodes = [n for n in held if n.capacity.gpu] or [n for n in ws.memo.pool(job.spec).nodes if n.capacity.gpu]
    if not nodes:
        return 0.0
    rates = [n.price_per_hour / n.capacity.gpu / 3600.0 for n in nodes]
    return sum(rates) / len(rates) if held else min(rates)


def _options(spec: JobSpec, want: dict[Role, int], model: JobModel, spare: int) -> list[tuple[int, float]]:
    """(workers, predicted seconds left) for each worker count the job may take."""
    role = spec.roles[Role.WORKER]
    per = max(role.resources.gpu, 1)
    top = max(want.get(Role.WORKER, role.min), min(role.max, want.get(Role.WORKER, role.min) + spare // per))
    out = []
    for k in range(max(role.min, 1), top + 1):
        t = model.remaining_time(k, want.get(Role.PS, 0))
        if t is not None and math.isfinite(t):
            out.append((k, t))
    return out


def apply_objectives(snap: Snapshot, jobs: list[JobView], sizes: Sizes, ws: Workspace) -> Sizes:
    """Resize the elastic jobs with a budget or deadline (module doc); notes say when one cannot be met."""
    if not snap.models:  # (no job has a model: each would be passed over, a Python step per live job)
        return sizes
    spare: int | None = None
    for job in jobs:
        spec = job.spec
        if spec.budget is None and spec.deadline is None:
            continue
        want, model = sizes.get(job.id), snap.models.get(job.id)
        if want is None or model is None or Role.WORKER not in spec.roles:
            continue
        if spare is None:
            spare = ws.total_free.gpu
        options = _options(spec, want, model, spare if spec.roles[Role.WORKER].elastic else 0)
        if not options:
            continue
        gpus = max(spec.roles[Role.WORKER].resources.gpu, 1)
        price = price_per_gpu_s(job, snap, ws)
        cost = {k: t * k * gpus * price for k, t in options}
        left = math.inf if spec.budget is None else spec.budget - job.spent
        affordable = [(k, t) for k, t in options if cost[k] <= left]
        if spec.deadline is not None:
            time_left = job.submit_time + spec.deadline - snap.now
            meets = [(k, t) for k, t in (affordable or options) if t <= time_left]
            if meets:
                k = min(meets, key=lambda o: (cost[o[0]], o[1]))[0]
            else:
                k, t = min(options, key=lambda o: (o[1], o[0]))
                ws.note(job.id, f"deadline: predicted to finish {t - time_left:,.0f} s late even at {k} worker(s)")
        elif affordable:
            k = min(affordable, key=lambda o: (o[1], o[0]))[0]
        else:
            k = options[0][0]
            ws.note(job.id, f"budget: ${left:,.2f} left, less than the ${cost[k]:,.2f} even {k} worker(s) need")
        sizes[job.id] = {**want, Role.WORKER: k}
    return sizes
