"""`srtf`: shortest remaining time first with oracle durations, a reference line.

Remaining time is `spec.estimate` (the job's true duration at its requested
size, which the workload loaders set only when asked for an oracle) minus the
seconds it has held resources. Preemptive and work-conserving like `tiresias`.
No real scheduler knows durations; this bounds what knowing them is worth.
"""

from __future__ import annotations

import math

from trainmaster.policies.cycle import Cycle, KeptSizes, place_in_order
from trainmaster.policies.preemption import preempt_lower
from trainmaster.policies.snapshot import JobView, Snapshot


def remaining(job: JobView) -> float:
    """Oracle seconds left; infinite (served last, FIFO) when the job has no estimate."""
    if job.spec.estimate is None:
        return math.inf
    return max(0.0, job.spec.estimate - job.runtime)


def by_remaining(snap: Snapshot) -> list[JobView]:
    return sorted(snap.jobs.values(), key=lambda j: (remaining(j), j.submit_time, j.id))


def make() -> Cycle:
    return Cycle(name="srtf", order=by_remaining, size=KeptSizes(), place=place_in_order(strict=False),
                 after=(preempt_lower,))
