"""Gavel's synthetic mix: 70% 1-GPU, 10% 2, 15% 4, 5% 8 jobs with Poisson arrivals.

Durations are 60 * 10^U(1.5, 3) s for 80% of jobs and 60 * 10^U(3, 4) s for the
rest (Gavel, OSDI'20, section 7). Seeded: the same seed gives the same jobs.
"""

from __future__ import annotations

import random

from trainmaster.core.job import simple_job
from trainmaster.workloads.base import LinearTruth, Workload, WorkloadJob

GPU_MIX = ((1, 0.70), (2, 0.10), (4, 0.15), (8, 0.05))


def synthetic(jobs: int, *, rate_per_hour: float = 20.0, seed: int = 0, elastic: bool = False) -> Workload:
    """`jobs` jobs arriving at `rate_per_hour` on average; `elastic` lets each run on 1..2x its GPUs."""
    rng = random.Random(seed)
    t = 0.0
    out = []
    for i in range(jobs):
        t += rng.expovariate(rate_per_hour / 3600.0)
        r = rng.random()
        gpus = next(g for g, p in _cumulative() if r < p)
        exponent = rng.uniform(1.5, 3.0) if rng.random() < 0.8 else rng.uniform(3.0, 4.0)
        duration = 60.0 * 10**exponent
        spec = simple_job(
            f"syn-{i}", gpus,
            min_gpus=1 if elastic else gpus, max_gpus=2 * gpus if elastic else gpus,
            estimate=duration, job_type="synthetic",
        )
        out.append(WorkloadJob(job_id=f"syn-{i}", submit_time=round(t, 3), spec=spec,
                               truth=LinearTruth(duration=duration, gpus=gpus)))
    return Workload(name=f"synthetic-{jobs}-seed{seed}", jobs=tuple(out))


def _cumulative() -> list[tuple[int, float]]:
    acc, out = 0.0, []
    for gpus, p in GPU_MIX:
        acc += p
        out.append((gpus, acc))
    out[-1] = (out[-1][0], 1.0 + 1e-9)
    return out
