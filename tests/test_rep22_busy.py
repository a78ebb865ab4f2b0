"""Session 20 (rep22): trainmaster's busy decision -- the start path builds less per start; one decide path.

Each change is exact, tested here against the code it replaced: `on_node` shares the tasks tuples it built
(`ClusterMemo.runs`); `TiresiasOrder.next_change` reads the holders' demotion times in C-level passes
(`tiresias._demotions`, switch `holders_in_c`); `Workspace.assign` is `_set` itself; a one-key mapping is
read by its key (no items view); `Cycle.decide_in` hands back the decision's workspace on both paths, which
`AdaptiveCycle` reads its live kinds from. The pinned plan digests (`test_recorded_plans.py`,
`test_trainmaster_busy_reads.py`) check the decisions as a whole.
"""

from __future__ import annotations

import math
import random

import pytest
from bench.decision_time import snapshot as bench_snapshot
from tests.builders import cluster, pending, running, snapshot
from tests.replay_helpers import spy_live_kinds

from trainmaster.core.allocation import Allocation, Placement, Runs, on_node
from trainmaster.core.job import Role
from trainmaster.policies.cycle import Cycle, head_of_line
from trainmaster.policies.registry import make_policy
from trainmaster.policies.snapshot import JobView, Snapshot
from trainmaster.policies.tiresias import THRESHOLD, TiresiasOrder, _demotions, _Entry, soonest_demotion
from trainmaster.policies.trainmaster import AdaptiveCycle
from trainmaster.policies.workspace import Workspace, demand


def test_on_node_shares_its_tasks_tuples_and_equals_the_reference() -> None:
    """`on_node` with `runs`: equal to `Allocation.of` of its placements (and hashing alike) for every role, node
    and size; the same (role, node, size) shares one tuple, another size or node builds its own."""
    runs: Runs = {}
    seen: dict[tuple[Role, str, int], Allocation] = {}
    rng = random.Random(22)
    for _ in range(300):
        role, node, n = rng.choice(list(Role)), f"n{rng.randrange(6)}", rng.randrange(0, 9)
        got = on_node(role, node, n, runs)
        reference = Allocation.of(Placement(role, node) for _ in range(n))
        assert got == reference and hash(got) == hash(reference) and len(got.tasks) == n
        assert got == on_node(role, node, n)  # (without runs: its own tuple)
        first = seen.setdefault((role, node, n), got)
        assert got.tasks is first.tasks and runs[role, node, n] is got.tasks
    assert len(runs) == len(seen)


def test_find_keeps_the_runs_in_the_cluster_memo() -> None:
    """One-node starts read their tasks from the cluster memo's runs: two jobs of the same size on one node share
    the tuple, across workspaces on one memo."""
    cl = cluster(2, 8)
    a, b = pending("a", 2), pending("b", 2)
    snap = snapshot(cl, a, b)
    ws = Workspace(snap)
    first = ws.find(a, {Role.WORKER: 2})
    assert first is not None
    ws.assign(a, first)
    second = ws.find(b, {Role.WORKER: 2})
    assert second is not None and second.nodes == first.nodes and second.tasks is first.tasks
    again = Workspace(snap, memo=ws.memo).find(a, {Role.WORKER: 2})
    assert again == first and again is not None and again.tasks is first.tasks
    assert ws.memo.runs == {(Role.WORKER, first.nodes[0], 2): first.tasks}


def test_demotions_against_the_loop() -> None:
    """`_demotions` (the minimum taken from inf, as `next_change` does) against the loop it replaced: random
    holders with and without entries, in Q0 and Q1, with and without GPUs, some past the threshold (negative
    times), and a NaN service (the loop's `min` keeps what it had; so does a minimum started from inf)."""
    rng = random.Random(2022)
    for case in range(200):
        entries: dict[str, _Entry] = {}
        jobs: dict[str, JobView] = {}
        allocations: dict[str, Allocation] = {}
        for k in range(rng.randrange(0, 30)):
            jid = f"j{k}"
            gpus = rng.choice([0, 1, 2, 4, 8])
            attained = rng.choice([0.0, rng.uniform(0, 2 * THRESHOLD), float("nan") if case % 17 == 0 else 1.0])
            jobs[jid] = pending(jid, max(gpus, 1), attained=attained)
            allocations[jid] = on_node(Role.WORKER, "n0", gpus)  # (none: no GPUs)
            if rng.random() < 0.9:
                entries[jid] = _Entry(rng.choice([0, 0, 1]), 0.0, rng.uniform(0, THRESHOLD), 0.0, 0.0)
        holders = list(jobs)
        rng.shuffle(holders)
        threshold = rng.choice([THRESHOLD, 3600.0])
        got = min([math.inf, *_demotions(entries, jobs, allocations, iter(holders), threshold)])
        want = soonest_demotion(entries, jobs, allocations, holders, threshold)
        assert got == want or (math.isnan(got) and math.isnan(want)), case


@pytest.mark.parametrize("policy", ["trainmaster", "tiresias"])
def test_next_change_in_c_on_a_busy_decision(policy: str) -> None:
    """A busy decision (1,500 pending): `next_change` with the holders read in C and by the loop agree, the
    wake-up and the plan too (a fresh policy each: the same order state)."""
    snap: Snapshot = bench_snapshot(busy=True, pending=1500)
    plans, waits = [], []
    for in_c in (True, False):
        p = make_policy(policy)
        order = p.order.ranks if hasattr(p.order, "ranks") else p.order  # type: ignore[attr-defined]
        assert isinstance(order, TiresiasOrder)
        order.holders_in_c = in_c
        plan = p.decide(snap)
        plans.append(plan)
        waits.append(order.next_change(snap, plan))
    assert waits[0] == waits[1] and waits[0] is not None
    assert plans[0] == plans[1]


def test_assign_is_set_and_is_recorded_by_a_trial() -> None:
    """`Workspace.assign` is `_set` (no frame of its own): an assign inside a trial is undone by `discard`."""
    assert Workspace.assign is Workspace._set
    cl = cluster(1, 8)
    a = pending("a", 2)
    ws = Workspace(snapshot(cl, a))
    free = ws.total_free
    trial = ws.trial()
    alloc = ws.find(a, {Role.WORKER: 2})
    assert alloc is not None
    ws.assign(a, alloc)
    assert ws.allocations["a"] is alloc and ws.total_free.gpu == free.gpu - 2
    trial.discard()
    assert "a" not in ws.allocations and ws.total_free == free


def test_demand_of_one_role_reads_its_count() -> None:
    """`demand` of a one-role gang: the task's resources times its count, the task itself for one."""
    spec = pending("a", 4).spec
    task = spec.roles[Role.WORKER].resources
    assert demand(spec, {Role.WORKER: 1}) is task
    for n in (0, 2, 3, 7):
        assert demand(spec, {Role.WORKER: n}) == task * n


def _elastic_snapshot() -> Snapshot:
    cl = cluster(2, 4)
    return snapshot(cl, running("r", 2, on="n0", min_gpus=1, max_gpus=4), pending("p", 1))


def test_decide_in_hands_back_the_decisions_workspace_on_both_paths() -> None:
    """`Cycle.decide_in`: the plan `decide` makes and the workspace it was made in (its snapshot the one
    decided), through the phases and through `from_line`."""
    snap = _elastic_snapshot()
    for cycle in (Cycle("phases"), Cycle("line", pending_only=True, from_line=head_of_line)):
        plan, ws = cycle.decide_in(snap)
        assert isinstance(ws, Workspace) and ws.snap is snap
        assert set(plan.allocations) == {jid for jid, a in ws.allocations.items() if a}
        assert plan.allocations == cycle.decide(snap).allocations


@pytest.mark.parametrize("line", [False, True])
def test_adaptive_cycle_reads_live_kinds_from_its_workspace_on_both_paths(line: bool,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The resize tick reads the decision's workspace's live kinds, with `from_line` set too: `LiveKinds.of` once
    per decision, through `Workspace.live_kinds` (before, a `from_line` cycle read `LiveKinds.of` afresh)."""
    snap = _elastic_snapshot()
    cycle = AdaptiveCycle("a", resize_tick=60.0, pending_only=line, from_line=head_of_line if line else None)
    computed, asked = spy_live_kinds(monkeypatch)
    plan = cycle.decide(snap)
    assert plan.wake_after == 60.0  # (an elastic job is live)
    assert computed == [snap] and len(asked) == 1 and asked[0].snap is snap
