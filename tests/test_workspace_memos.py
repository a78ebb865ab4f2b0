"""What a placement search fills in for a new allocation is what the allocation would compute itself.

`Workspace.find` builds a one-node allocation and hands it what it takes (`Allocation.remember`: per node,
in all, GPUs), since it already summed the gang; `_take` and the presets read those memos. A search over
random gangs on a random busy cluster checks each against a copy of the allocation without memos, and
that assigning every found gang leaves the free capacity a fresh sum would.
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from builders import cluster, pending, running, snapshot
from trainmaster.core.allocation import Allocation
from trainmaster.core.job import Role, RoleSpec
from trainmaster.core.resources import Resources
from trainmaster.policies.workspace import Workspace


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_found_allocations_carry_the_values_they_would_compute(seed: int) -> None:
    rng = random.Random(seed)
    cl = cluster(12, 8)
    jobs = [running(f"r{i}", rng.choice((1, 2, 4)), on=f"n{i % 12}") for i in range(10)]
    for i in range(60):
        job = pending(f"p{i}", rng.choice((1, 2, 3, 4, 8)))
        if i % 3 == 0:  # more than GPUs per task: CPU and memory too, several tasks per node
            role = RoleSpec(min=job.spec.roles[Role.WORKER].min, max=job.spec.roles[Role.WORKER].max,
                            resources=Resources(cpu=rng.choice((2000, 4000)), memory=rng.choice((2, 8)) << 30,
                                                gpu=1))
            job = replace(job, spec=replace(job.spec, roles={Role.WORKER: role}))
        jobs.append(job)
    snap = snapshot(cl, *jobs)
    ws = Workspace(snap)
    found = 0
    for job in jobs[10:]:
        want = {Role.WORKER: job.spec.roles[Role.WORKER].min}
        alloc = ws.find(job, want)
        if alloc is None:
            continue
        bare = Allocation(alloc.tasks)  # the same placements, no memos
        assert alloc == bare
        assert alloc.per_node(job.spec) == bare.per_node(job.spec)
        assert alloc.resources(job.spec) == bare.resources(job.spec)
        assert alloc.gpus(job.spec) == bare.gpus(job.spec)
        ws.assign(job, alloc)
        found += 1
    assert found > 10
    free = {n.name: n.capacity for n in cl.nodes}
    for jid, alloc in ws.allocations.items():
        for name, res in Allocation(alloc.tasks).per_node(snap.jobs[jid].spec).items():
            free[name] = free[name] - res
    assert ws.free == free
    assert ws.total_free == sum(free.values(), start=Resources())
