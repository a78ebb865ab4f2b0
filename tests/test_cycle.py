"""The rank-preemption hook (`preempt_lower`) and the workspace's tightest-fit choice."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from builders import cluster, node, pending, preempted, running, snapshot, started
from trainmaster.core.allocation import Placement
from trainmaster.core.cluster import Cluster
from trainmaster.core.job import Role
from trainmaster.core.resources import Resources
from trainmaster.policies.cycle import Cycle, by_submit_time, place_in_order
from trainmaster.policies.preemption import preempt_lower
from trainmaster.policies.waits import Wait, WaitKind
from trainmaster.policies.workspace import Workspace

BIG_TASK = Resources(gpu=4)  # one worker that needs a whole 4-GPU node


def policy() -> Cycle:
    """Submit order is priority; preemptive, work-conserving."""
    return Cycle(name="test", order=by_submit_time, place=place_in_order(strict=False), after=(preempt_lower,))


def test_no_eviction_when_fragmentation_would_still_block() -> None:
    # Enough GPUs in total once x and y go, but no node would ever have 4 free: nobody is evicted.
    snap = snapshot(cluster(2, 4),
                    running("h", 2, on="n0", submit=0), running("h2", 2, on="n1", submit=1),
                    pending("p", 1, per_task=BIG_TASK, submit=2),
                    running("x", 2, on="n0", submit=3), running("y", 1, on="n1", submit=4), now=10.0)
    plan = policy().decide(snap)
    assert preempted(plan, snap) == set()
    assert started(plan, snap) == set()
    assert "p" not in plan.allocations


def test_evicted_job_moves_where_it_still_fits() -> None:
    snap = snapshot(cluster(2, 4), running("z", 2, on="n1", submit=0), pending("p", 1, per_task=BIG_TASK, submit=1),
                    running("x", 2, on="n0", submit=2), now=10.0)
    plan = policy().decide(snap)
    assert plan.allocations["p"].tasks == (Placement(Role.WORKER, "n0"),)
    assert plan.allocations["x"].nodes == ("n1",)  # migrated, not stopped
    assert plan.allocations["z"] == snap.jobs["z"].allocation
    assert plan.reasons["x"].startswith("moved") and "x" not in plan.waits


def test_higher_ranked_jobs_are_never_victims() -> None:
    snap = snapshot(cluster(1, 4), running("early", 4, submit=0), pending("late", 2, submit=1), now=10.0)
    plan = policy().decide(snap)
    assert plan.allocations.keys() == {"early"}


def test_victims_lowest_rank_first_and_no_more_than_needed() -> None:
    snap = snapshot(cluster(1, 4), pending("p", 2, submit=0), running("a", 1, submit=1),
                    running("b", 1, submit=2), running("c", 2, submit=3), now=10.0)
    plan = policy().decide(snap)
    assert preempted(plan, snap) == {"c"}
    assert plan.waits["c"] == Wait(WaitKind.PRIORITY, "preempted by p (ranked ahead of it)")


@settings(max_examples=60, deadline=None)
@given(gpus=st.lists(st.integers(0, 8), min_size=1, max_size=12),
       steps=st.lists(st.tuples(st.integers(1, 6), st.integers(1, 8)), min_size=1, max_size=25))
def test_find_picks_the_tightest_node_as_a_full_scan_would(gpus: list[int], steps: list[tuple[int, int]]) -> None:
    """The workspace's fit index agrees with a scan: fewest free GPUs, then CPUs, then cluster order."""
    cl = Cluster(tuple(node(f"n{i}", g, cpu=4 * max(g, 1) + i % 3) for i, g in enumerate(gpus)))
    ws = Workspace(snapshot(cl))
    views = []
    for k, (workers, cpu) in enumerate(steps):
        view = pending(f"j{k}", workers, per_task=Resources(gpu=1, cpu=cpu * 500))
        views.append(view)
        demand = view.spec.min_resources
        fitting = [(ws.free[n.name].gpu, ws.free[n.name].cpu, i, n.name) for i, n in enumerate(cl.nodes)
                   if demand.fits_in(ws.free[n.name])]
        found = ws.find(view, {Role.WORKER: workers})
        if fitting:
            assert found is not None and found.nodes == (min(fitting)[3],)
        if found is not None:
            ws.assign(view, found)
        if k % 4 == 3:  # release an earlier job now and then
            ws.release(views[k - 2])
        assert all(r.is_nonnegative() for r in ws.free.values())
