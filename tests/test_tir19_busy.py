"""Session 18 (tir19): tiresias' busy decision, cut exactly.

A one-role gang no single node holds is spread by counting tasks per node (`workspace._spread_one`, built by
`allocation.on_nodes`, its per-node memo filled) instead of placements built and dropped; the order is read
from the views' dict copy (`copy_mapping`); `Workspace.plan`, `find` and `_holding_some` lose per-job frames;
`LowerRank.room` skips a bisection whose answer is its cursor; a start placed as is settles without a pass over
its (no) victims. Each is checked against the code it replaced; `test_recorded_plans.py` pins the schedules.
"""

from __future__ import annotations

import random
from bisect import bisect_right
from collections.abc import Iterator
from typing import Any

import pytest
from bench.decision_time import snapshot as bench_snapshot
from tests.builders import cluster, pending, running, snapshot
from tests.replay_helpers import Before, on_and_off, preset_plans, spy

from trainmaster.core.allocation import Allocation, Placement, on_nodes
from trainmaster.core.job import Role
from trainmaster.core.resources import Resources
from trainmaster.policies import preemption, workspace
from trainmaster.policies.preemption import LowerRank
from trainmaster.policies.registry import make_policy
from trainmaster.policies.snapshot import JobView, Plan, Snapshot
from trainmaster.policies.workspace import Workspace, _spread_one, copies, copy_mapping
from trainmaster.workloads.loaders import load_workload


# -- the spread of a one-role gang ------------------------------------------------------------------
def _greedy_copies(task: Resources, room: Resources, cap: int) -> int:
    """The reference: how many `task`s the greedy fill puts in `room` one after another (at most `cap`)."""
    k = 0
    while k < cap and task.fits_in(room):
        room = room - task
        k += 1
    return k


def test_copies_is_the_greedy_fill() -> None:
    rng = random.Random(11)
    fields = (-3, -1, 0, 1, 2, 3, 5, 8, 13)
    for _ in range(3000):
        task = Resources(rng.choice((0, 0, 1, 2, 3)), rng.choice((0, 1, 4)), rng.choice((0, 1, 1, 2, 4)))
        room = Resources(rng.choice(fields), rng.choice(fields), rng.choice(fields))
        found = copies(task, room)
        expected = _greedy_copies(task, room, 64)
        assert (64 if found < 0 else min(found, 64)) == expected, (task, room)
        assert found >= 0 or (task.is_zero() and room.is_nonnegative())


def _gangs(rng: random.Random) -> Iterator[tuple[Snapshot, Workspace, JobView, dict[str, Resources]]]:
    """Random free maps (some nodes overfilled: negative CPU) and one-role gangs of random shapes."""
    cl = cluster(12, 8)
    for _ in range(400):
        per_task = Resources(rng.choice((0, 500, 2000)), rng.choice((0, 2**30)), rng.choice((0, 1, 1, 2, 3)))
        snap = snapshot(cl, pending("g", rng.choice((1, 2, 3, 5, 8, 13)), per_task=per_task))
        ws = Workspace(snap)
        for name in ws.free:
            ws.free[name] = Resources(rng.choice((-4000, 0, 1000, 3000, 8000)), rng.choice((0, 2**31, 2**34)),
                                      rng.choice((0, 0, 1, 2, 3, 4, 8)))
        free = {name: r for name, r in ws.free.items() if rng.random() < 0.8}
        yield snap, ws, snap.jobs["g"], free


def test_spread_one_is_the_spread(monkeypatch: pytest.MonkeyPatch) -> None:
    """`_spread_one` gives `_spread`'s allocation (the greedy fill's nodes, the even spread over them; None where
    the fill fails) with the same tasks in the same order, and memos equal to what the allocation computes."""
    rng = random.Random(1931)
    spread_some = 0
    for _, ws, job, free in _gangs(rng):
        spec = job.spec
        counts = {Role.WORKER: spec.roles[Role.WORKER].min}
        lean = _spread_one(spec, counts, free)
        monkeypatch.setattr(Workspace, "lean_spread", False)
        reference = ws._spread(spec, counts, dict(free), [], job)
        monkeypatch.setattr(Workspace, "lean_spread", True)
        assert ws._spread(spec, counts, dict(free), [], job) == lean
        assert lean == reference
        if lean is None or reference is None:
            continue
        spread_some += len(lean.nodes) > 1
        assert lean.tasks == reference.tasks and hash(lean) == hash(reference)
        fresh = Allocation.of(reference.tasks)  # (no memo: computes its own)
        assert list(lean.per_node(spec).items()) == list(fresh.per_node(spec).items())
        assert lean.resources(spec) == fresh.resources(spec) and lean.gpus(spec) == fresh.gpus(spec)
    assert spread_some > 50


def test_spread_one_is_taken_only_for_one_role_without_preferred_nodes(monkeypatch: pytest.MonkeyPatch) -> None:
    cl = cluster(3, 4)
    snap = snapshot(cl, running("r", 3, on="n0"), pending("g", 5))
    ws = Workspace(snap)
    spec = snap.jobs["g"].spec
    taken = spy(monkeypatch, workspace, "_spread_one")
    ws._spread(spec, {Role.WORKER: 5}, dict(ws.free), ["n0"])  # preferred nodes: `_spread` itself
    assert not taken
    assert ws._spread(spec, {Role.WORKER: 5}, dict(ws.free), []) is not None
    assert len(taken) == 1


@pytest.mark.parametrize("counts", [{"n3": 2, "n10": 1, "n1": 3}, {"b": 1}, {"n2": 4, "n0": 4}, {}])
def test_on_nodes_is_of(counts: dict[str, int]) -> None:
    for role in Role:
        built = on_nodes(role, counts)
        reference = Allocation.of([Placement(role, node) for node, k in counts.items() for _ in range(k)])
        assert built == reference and hash(built) == hash(reference) and built.tasks == reference.tasks
        assert built.role_counts == reference.role_counts and built.nodes == reference.nodes
        assert bool(built) == bool(reference)


def test_holding_some_is_the_filter() -> None:
    """`_holding_some` with one task shape (no `any` per node): the nodes whose free capacity holds the task."""
    rng = random.Random(7)
    for snap, ws, job, _ in _gangs(rng):
        spec = job.spec
        task = spec.roles[Role.WORKER].resources
        counts = {Role.WORKER: spec.roles[Role.WORKER].min}
        found = ws._holding_some(spec, counts, ws.memo.pool(spec))
        assert list(found.items()) == [(n.name, ws.free[n.name]) for n in snap.cluster.nodes
                                       if task.fits_in(ws.free[n.name])]


@pytest.mark.parametrize("field", ["cpu", "memory", "gpu"])
def test_find_refuses_a_need_over_the_free_total(field: str) -> None:
    """`find`'s total test (`fits_in`, inlined): one unit over the free total in any field finds nothing."""
    cl = cluster(2, 4)
    snap = snapshot(cl, running("r", 2, on="n0"), pending("g", 1))
    ws = Workspace(snap)
    job = snap.jobs["g"]
    free = ws.total_free
    exact = Resources(free.cpu, free.memory, free.gpu)
    over = Resources(**{**{"cpu": free.cpu, "memory": free.memory, "gpu": free.gpu},
                        field: getattr(free, field) + 1})
    assert ws.find(job, {Role.WORKER: 1}, need=over) is None
    ws.free = {name: exact if name == "n1" else Resources() for name in ws.free}
    ws.total_free = exact
    assert ws.find(job, {Role.WORKER: 1}, need=exact) is not None


def test_spread_replays_alike(monkeypatch: pytest.MonkeyPatch) -> None:
    """Replays with `lean_spread` on and off plan alike (8-GPU gangs on 4-GPU nodes: spreads), the lean one
    taking spreads; and the busy snapshot's decisions for tiresias and srtf."""
    workload = load_workload("synthetic:200:60", max_factor=1.0, seed=3, oracle=True)
    for preset in ("tiresias", "srtf"):
        fast, _ = on_and_off(monkeypatch, lambda preset=preset: preset_plans(preset, workload),
                             (Workspace, "lean_spread"),
                             spies={"spread": (workspace, "_spread_one")})
        assert sum(a is not None and len(a.nodes) > 1 for a in fast.calls["spread"]) > 10
    snap = bench_snapshot(busy=True, pending=3000)
    for preset in ("tiresias", "srtf"):
        plans: list[Plan] = []
        for lean in (True, False):
            monkeypatch.setattr(Workspace, "lean_spread", lean)
            policy = make_policy(preset)
            plans += [policy.decide(snap), policy.decide(snap)]
        assert plans[:2] == plans[2:]
        assert list(plans[1].allocations) == list(plans[3].allocations)


# -- the order's reads, the plan ------------------------------------------------------------------------------
def test_copy_mapping_copies_proxies_and_mappings() -> None:
    from types import MappingProxyType
    base = {"a": 1, "b": 2}
    for mapping in (base, MappingProxyType(base)):
        copied = copy_mapping(mapping)
        assert copied == base and copied is not base and type(copied) is dict and list(copied) == list(base)

    class Custom(dict[str, int]):
        pass

    custom = copy_mapping(Custom(base))
    assert custom == base and type(custom) is dict


def test_order_reads_the_snapshots_own_views() -> None:
    """The kept order (tiresias, srtf) hands back the snapshot's own view objects, in its order, decision after
    decision (the views' dict copy holds the same objects)."""
    snap = bench_snapshot(busy=True, pending=500)
    for preset in ("tiresias", "srtf"):
        policy: Any = make_policy(preset)
        order = policy.ranks if preset == "tiresias" else policy.order
        for _ in range(2):
            ordered = order(snap)
            assert len(ordered) == len(snap.jobs)
            assert all(view is snap.jobs[view.id] for view in ordered)
        if preset == "tiresias":
            order.kept_order = False
            assert order(snap) == ordered
        else:
            type(order).kept = False
            try:
                assert order(snap) == ordered
            finally:
                type(order).kept = True


def test_plan_drops_an_assigned_empty_allocation() -> None:
    """`plan` leaves out a job assigned nothing (C-level passes over the assigned ones), keeps the others."""
    cl = cluster(2, 4)
    snap = snapshot(cl, running("r", 2, on="n0"), pending("p", 1), pending("e", 1))
    ws = Workspace(snap)
    placed = ws.place(snap.jobs["p"], {Role.WORKER: 1})
    assert placed is not None
    ws.assign(snap.jobs["e"], Allocation())
    ws.release(snap.jobs["r"])
    plan = ws.plan()
    assert list(plan.allocations) == ["p"]
    assert plan.allocations["p"] == placed


# -- preemption -------------------------------------------------------------------------------------
def _busy(n: int) -> Iterator[JobView]:
    for i in range(n):
        yield running(f"r{i}", 4, on=f"n{i // 2}", submit=float(i), attained=1e9 if i % 2 else 0.0)


def _preempting_workspace(claimants: int, gpus: int = 1) -> tuple[Snapshot, Workspace, list[JobView]]:
    cl = cluster(6, 8)
    jobs = [*_busy(12), *(pending(f"p{i}", gpus, submit=100.0 + i) for i in range(claimants))]
    snap = snapshot(cl, *jobs)
    ws = Workspace(snap, empty=True)
    ranked = sorted(jobs, key=lambda j: (j.attained > 1, j.submit_time))
    ws.rank = {j.id: k for k, j in enumerate(ranked)}
    ws.want = {j.id: {Role.WORKER: j.spec.roles[Role.WORKER].min} for j in jobs}
    for j in jobs:
        if j.allocation:
            ws.assign(j, j.allocation)
    return snap, ws, [j for j in ranked if not j.allocation]


def test_room_is_the_bisection() -> None:
    """`LowerRank.room` past its cursor shortcut: the cursor and room a bisection from the cursor gives, for
    claimants in rank order (each asked twice, as `exhausted` does), and for one ranked after every holder."""
    snap, ws, claimants = _preempting_workspace(6)
    rule = LowerRank(ws)
    for claimant in [*claimants, snap.jobs["r11"]]:
        for _ in range(2):
            before = rule.cursor
            mine = ws.rank[claimant.id]
            expected = bisect_right(rule.holders, mine, before, rule.end, key=ws.rank.__getitem__)
            room = rule.room(claimant)
            assert rule.cursor == expected
            held = [ws.allocations[h].resources(snap.jobs[h].spec) for h in rule.holders[expected:rule.end]]
            assert room == sum(held, start=Resources())


def test_a_start_placed_as_is_settles_with_no_victims(monkeypatch: pytest.MonkeyPatch) -> None:
    """A claimant that fits as is is settled once, placed, with no victims and no note; one that evicts gets
    its victims and a note (the victims' pass kept for it)."""
    snap, ws, claimants = _preempting_workspace(10)
    settled = spy(monkeypatch, LowerRank, "settled", lambda out, self, claimant, evicted, placed: (
        claimant.id, [v.id for v in evicted], placed))
    preemption.preempt_lower(snap, claimants, ws)
    started = [c for c in settled if c[2]]
    assert len(started) == 10
    as_is = [c for c in started if not c[1]]
    evicting = [c for c in started if c[1]]
    assert as_is and evicting
    assert all(jid not in ws.notes for jid, _, _ in as_is)
    assert all(ws.notes[jid].startswith("started by preempting") for jid, _, _ in evicting)
    assert all(ws.kind(v) is not None for _, victims, _ in evicting for v in victims)


def test_victims_move_in_rank_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """The victims still out are tried again in rank order (sorted by a C-level key, as the lambda sorted them):
    the busy snapshot's tiresias decision keys them (`gang_key`) in that order."""
    snap = bench_snapshot(busy=True, pending=500)
    policy: Any = make_policy("tiresias")
    policy.decide(snap)
    keyed = spy(monkeypatch, preemption, "gang_key", Before(lambda spec, want, mixed: spec.name))
    ranked = spy(monkeypatch, Workspace, "plan", Before(lambda ws: dict(ws.rank)))
    policy.decide(snap)
    victims = [jid for jid in keyed if jid in snap.jobs and snap.jobs[jid].active]
    assert len(victims) > 100 and len(set(victims)) == len(victims)
    rank = ranked[-1]
    assert [rank[jid] for jid in victims] == sorted(rank[jid] for jid in victims)
