"""The state kept across decisions so their cost follows what changed: it must match a fresh computation."""

from __future__ import annotations

import dataclasses
import random
from types import MappingProxyType

import pytest

from trainmaster.controller.loop import Controller
from trainmaster.core.allocation import Allocation, Placement
from trainmaster.core.cluster import parse_shorthand
from trainmaster.core.job import Role, simple_job
from trainmaster.core.resources import Resources
from trainmaster.core.states import JobState
from trainmaster.engines.sim.engine import SimEngine
from trainmaster.policies.pending import PendingDemand, PendingLine, QueueHeld, shape_of
from trainmaster.policies.registry import make_policy
from trainmaster.policies.snapshot import JobView, PendingIds, Snapshot
from trainmaster.policies.workspace import ClusterMemo
from trainmaster.workloads.base import LinearTruth, Workload, WorkloadJob

CLUSTER = parse_shorthand("4x4")


def snap_of(jobs: dict[str, JobView]) -> Snapshot:
    return Snapshot(now=0.0, cluster=CLUSTER, jobs=MappingProxyType(dict(jobs)),
                    free=MappingProxyType({n.name: n.capacity for n in CLUSTER.nodes}))


def test_line_and_demand_follow_random_joins_leaves_and_spec_changes() -> None:
    rng = random.Random(7)
    line, demand, memo = PendingLine(), PendingDemand(), ClusterMemo(CLUSTER)
    jobs: dict[str, JobView] = {}
    origin, version, deltas = object(), 0, 0
    for step in range(300):
        before = set(jobs)
        for _ in range(rng.randint(0, 4)):  # arrivals, some out of submit order
            jid = f"j{step}-{rng.randint(0, 10**6)}"
            spec = simple_job(jid, rng.choice([1, 2, 4, 8, 32]))  # 32 GPUs never fit on 4x4
            jobs[jid] = JobView(id=jid, spec=spec, state=JobState.PENDING, submit_time=float(rng.randint(0, 400)))
        for jid in rng.sample(sorted(jobs), k=min(len(jobs), rng.randint(0, 3))):  # departures anywhere
            del jobs[jid]
        fitting = sorted(jid for jid, j in jobs.items() if j.spec.min_gpus != 32)
        if fitting and rng.random() < 0.2:  # a spec changes (Controller.update); never-fits verdicts stay
            jid = rng.choice(fitting)
            jobs[jid] = dataclasses.replace(jobs[jid], spec=simple_job(jid, rng.choice([1, 2, 4])))
        snap = snap_of(jobs)
        # The controller's journal (`PendingIds`): joined and left since the last snapshot, plus ids touched
        # with no net change; now and then a snapshot the line does not see (it must compare every id then).
        version += rng.choice([1, 1, 1, 2])
        deltas += line.seen == (origin, version - 1)
        noise = rng.sample(sorted(before | set(jobs)), k=min(2, len(before | set(jobs))))
        pending = PendingIds(jobs, origin, version, frozenset(set(jobs) - before) | (set(noise) & set(jobs)),
                             frozenset(before - set(jobs)) | (set(noise) - set(jobs)) | {"never-seen"})
        ids = line.sync(snap, pending, memo)
        line.reshape(snap, ids)
        assert ids == [j.id for j in sorted(jobs.values(), key=lambda j: (j.submit_time, j.id))]
        assert line.bad == {jid for jid, j in jobs.items() if j.spec.min_gpus == 32}
        for shape, part in line.by_shape.items():
            assert part == sorted(part) and all(shape_of(jobs[k[1]].spec) == shape for k in part)
        assert sum(len(p) for p in line.by_shape.values()) == len(jobs)
        assert demand.of(snap, pending) == sum((j.spec.min_resources for j in jobs.values()), start=Resources())
    assert 150 < deltas < 300  # most syncs followed the journal, some compared every id


def test_a_reason_noted_elsewhere_is_noted_again_by_the_next_decision() -> None:
    """The controller skips reasons that did not change since it noted them, but not one somebody overwrote."""
    jobs = tuple(WorkloadJob(job_id=name, submit_time=t, spec=simple_job(name, gpus),
                             truth=LinearTruth(duration=3600.0, gpus=gpus))
                 for name, t, gpus in (("a", 0.0, 4), ("b", 1.0, 4), ("c", 2.0, 1)))
    engine = SimEngine(parse_shorthand("1x4"), Workload(name="three", jobs=jobs))
    controller = Controller(engine, make_policy("fifo"))
    while "c" not in controller.live or controller.live["c"].why != "priority: waiting behind b, first in line":
        assert controller.step()
    waiting = controller.live["c"]
    waiting.note(controller.clock.now(), "held by an operator")
    controller.cycle()  # the same plan: c still waits behind b
    assert controller.last_plan.reasons["c"] == "priority: waiting behind b, first in line"
    assert waiting.why == "priority: waiting behind b, first in line"
    texts = [text for _, text in waiting.decisions]
    assert texts[-2:] == ["held by an operator", "priority: waiting behind b, first in line"]
    controller.cycle()  # unchanged and not overwritten: not noted twice
    assert [text for _, text in waiting.decisions].count("priority: waiting behind b, first in line") == 2


@pytest.mark.parametrize("journal", [False, True])
def test_queue_held_follows_random_starts_stops_moves_and_spec_changes(journal: bool) -> None:
    """drf's per-queue usage kept across decisions equals a fresh sum after every change (`journal`: the
    snapshots name the jobs whose spec changed, so only those and the moved allocations are looked at)."""
    rng = random.Random(11)
    held, nodes = QueueHeld(), [n.name for n in CLUSTER.nodes]
    jobs: dict[str, JobView] = {}
    allocations: dict[str, Allocation] = {}
    origin = object()
    for step in range(300):
        respecced: set[str] = set()
        for _ in range(rng.randint(0, 3)):  # starts
            jid = f"j{step}-{rng.randint(0, 10**6)}"
            spec = dataclasses.replace(simple_job(jid, rng.choice([1, 2, 4])), queue=rng.choice(["a", "b", "c"]))
            jobs[jid] = JobView(id=jid, spec=spec, state=JobState.RUNNING, submit_time=0.0)
            allocations[jid] = Allocation.of([Placement(Role.WORKER, rng.choice(nodes))])
        for jid in rng.sample(sorted(allocations), k=min(len(allocations), rng.randint(0, 2))):  # stops
            del allocations[jid], jobs[jid]
        if allocations and rng.random() < 0.3:  # a job moves (a new allocation) or its spec changes
            jid = rng.choice(sorted(allocations))
            if rng.random() < 0.5:
                allocations[jid] = Allocation.of([Placement(Role.WORKER, rng.choice(nodes))])
            else:
                jobs[jid] = dataclasses.replace(jobs[jid], spec=simple_job(jid, rng.choice([1, 2, 4])))
                respecced.add(jid)
        fresh: dict[str, Resources] = {}
        for jid, alloc in allocations.items():
            spec = jobs[jid].spec
            fresh[spec.queue] = fresh.get(spec.queue, Resources()) + alloc.resources(spec)
        snap = snap_of(jobs)
        if journal:
            snap = dataclasses.replace(snap, pending_ids=PendingIds((), origin, step + 1, frozenset(), frozenset(),
                                                                    frozenset(respecced)))
        kept = held.of(snap, dict(allocations))
        assert {q: r for q, r in kept.items() if r != Resources()} == fresh
