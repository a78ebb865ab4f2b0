"""Test builders: clusters, jobs, job views and snapshots in one line each.

Other test files import these so scenario tables stay short:

    snap = snapshot(cluster(2, 4), running("a", 4, on="n0", attained=100), pending("b", 2, submit=5))
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from types import MappingProxyType

from trainmaster.core.allocation import Allocation, Placement
from trainmaster.core.cluster import Cluster, parse_shorthand
from trainmaster.core.job import Architecture, JobSpec, Role, RoleSpec, simple_job
from trainmaster.core.node import Node
from trainmaster.core.resources import Resources
from trainmaster.core.states import JobState
from trainmaster.policies.snapshot import JobView, Plan, Snapshot
from trainmaster.workloads.base import LinearTruth, Workload, WorkloadJob


def cluster(nodes: int, gpus: int) -> Cluster:
    """`nodes` nodes named n0.. with `gpus` GPUs each (the `16x4` shorthand)."""
    return parse_shorthand(f"{nodes}x{gpus}")


def node(name: str, gpus: int = 4, *, cpu: int = 48, memory_gib: int = 192, **fields: object) -> Node:
    return Node(name=name, capacity=Resources(cpu=cpu * 1000, memory=memory_gib * 2**30, gpu=gpus),
                gpu_type="gpu" if gpus else None, **fields)  # type: ignore[arg-type]


def job(name: str, gpus: int = 1, *, min_gpus: int | None = None, max_gpus: int | None = None,
        **fields: object) -> JobSpec:
    """A one-role all-reduce job of 1-GPU workers (elastic when min/max differ)."""
    return simple_job(name, gpus, min_gpus=min_gpus, max_gpus=max_gpus, **fields)


def alloc(spec: JobSpec, *nodes: str) -> Allocation:
    """One worker per entry of `nodes` (repeat a name for several workers there)."""
    return Allocation.of(Placement(Role.WORKER, n) for n in nodes)


def spread(gpus: int, on: str | Iterable[str]) -> tuple[str, ...]:
    """`gpus` worker slots on one node name, or one per name given."""
    return (on,) * gpus if isinstance(on, str) else tuple(on)


def pending(name: str, gpus: int = 1, *, submit: float = 0.0, attained: float = 0.0, runtime: float = 0.0,
            restarts: int = 0, spec: JobSpec | None = None, **fields: object) -> JobView:
    return JobView(id=name, spec=spec or job(name, gpus, **fields), state=JobState.PENDING, submit_time=submit,
                   attained=attained, runtime=runtime, restarts=restarts)


def running(name: str, gpus: int = 1, *, on: str | Iterable[str] = "n0", submit: float = 0.0,
            since: float = 0.0, attained: float = 0.0, runtime: float | None = None,
            spec: JobSpec | None = None, **fields: object) -> JobView:
    """A RUNNING job holding `gpus` workers on node `on` (or one per name in `on`)."""
    spec = spec or job(name, gpus, **fields)
    slots = spread(gpus, on)
    return JobView(id=name, spec=spec, state=JobState.RUNNING, submit_time=submit, allocation=alloc(spec, *slots),
                   first_start=since, running_since=since, attained=attained,
                   runtime=attained / max(gpus, 1) if runtime is None else runtime)


def snapshot(cl: Cluster, *jobs: JobView, now: float = 0.0) -> Snapshot:
    """A snapshot whose free capacity is the cluster minus what the active jobs hold."""
    free = {n.name: n.capacity for n in cl.nodes}
    for view in jobs:
        if view.active:
            for name, res in view.allocation.per_node(view.spec).items():
                free[name] = free[name] - res
                assert free[name].is_nonnegative(), f"builder overfilled {name}"
    return Snapshot(now=now, cluster=cl, jobs=MappingProxyType({j.id: j for j in jobs}),
                    free=MappingProxyType(free))


def started(plan: Plan, snap: Snapshot) -> set[str]:
    """Jobs the plan runs that were not running in the snapshot."""
    return {jid for jid in plan.allocations if not snap.jobs[jid].active}


def preempted(plan: Plan, snap: Snapshot) -> set[str]:
    """Running jobs the plan no longer runs."""
    return {jid for jid, j in snap.jobs.items() if j.active and jid not in plan.allocations}


def gpus_used(plan: Plan, snap: Snapshot) -> dict[str, int]:
    used: dict[str, int] = {}
    for jid, a in plan.allocations.items():
        for name, res in a.per_node(snap.jobs[jid].spec).items():
            used[name] = used.get(name, 0) + res.gpu
    return used


def with_ps(spec: JobSpec, count: int = 1, cpu: int = 2) -> JobSpec:
    """The same job as a parameter-server job with `count` CPU-only parameter servers."""
    ps = RoleSpec(min=count, max=count, resources=Resources(cpu=cpu * 1000, memory=2**30))
    return replace(spec, architecture=Architecture.PARAMETER_SERVER, roles={**spec.roles, Role.PS: ps})


def linear_workload(rows: Iterable[tuple[str, float, int, float]], *, oracle: bool = False,
                    min_gpus: dict[str, int] | None = None, ps: Iterable[str] = ()) -> Workload:
    """Jobs from `(name, submit, gpus, duration)` rows; `oracle` sets `estimate` to the duration.

    Names in `min_gpus` are elastic down to that many workers; names in `ps` get a parameter server.
    """
    out = []
    with_server = set(ps)
    for name, submit, gpus, duration in rows:
        lo = (min_gpus or {}).get(name, gpus)
        spec = job(name, gpus, min_gpus=lo, max_gpus=gpus, **({"estimate": duration} if oracle else {}))
        if name in with_server:
            spec = with_ps(spec)
        out.append(WorkloadJob(job_id=name, submit_time=submit, spec=spec,
                               truth=LinearTruth(duration=duration, gpus=gpus)))
    return Workload(name="test", jobs=tuple(out))
