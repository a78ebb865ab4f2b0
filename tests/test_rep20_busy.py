"""Session 18 (rep20): trainmaster's busy decision with fewer frames and fewer tracked objects per start.

Each change is exact, tested here against the code it replaced: `try_place` handed the claimant's `need` (no
second `demand`); `_evict_for` opening no trial before an as-is start where `try_place` cannot change anything
when it fails (no queue definitions); `SameClassLowerRank` reading the implicit queue without `queue_of`;
`fair_order` a plain list iterator without queues; `any_adaptive` in C-level passes; `_FitIndex`'s keys
against `_fit_key`; `find`, `_find`, `ClusterMemo.pool` and `Allocation.gpus` without cells (their rare
comprehensions moved out); `Allocation`'s three memos in one list.
"""

from __future__ import annotations

import random
import types
from dataclasses import replace
from typing import Any

import pytest
from bench.decision_time import snapshot as bench_snapshot
from bench.record_plans import QUEUES
from tests.builders import cluster, job, pending, running, snapshot, with_ps

from trainmaster.core.allocation import Allocation, Placement, on_node
from trainmaster.core.job import BatchRange, Role
from trainmaster.core.resources import Resources
from trainmaster.policies import fairshare, goodput, preemption
from trainmaster.policies import queues as queues_module
from trainmaster.policies import workspace as workspace_module
from trainmaster.policies.las import SameClassLowerRank
from trainmaster.policies.queuebook import QueueBook
from trainmaster.policies.registry import make_policy
from trainmaster.policies.snapshot import JobView, Snapshot
from trainmaster.policies.workspace import ClusterMemo, Workspace, _fit_key, _FitIndex, demand


# -- try_place with the need -------------------------------------------------------------------
def test_try_place_uses_the_need_it_is_handed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Handed `need`, `try_place` computes no `demand` of its own (without queue definitions, none at all) and
    places as without."""
    cl = cluster(2, 4)
    own: list[object] = []
    found: list[object] = []
    real_q, real_w = queues_module.demand, workspace_module.demand
    for queued in (False, True):
        snap = snapshot(cl, running("h", 2, on="n0"), pending("p", 3), pending("q", 2))
        if queued:
            snap = replace(snap, queues=QUEUES)
        plain, given = Workspace(snap), Workspace(snap)
        for jid in ("p", "q"):
            view, want = snap.jobs[jid], {Role.WORKER: snap.jobs[jid].spec.roles[Role.WORKER].min}
            need = demand(view.spec, want)
            expected = queues_module.try_place(plain, view, want)
            own.clear()
            found.clear()
            monkeypatch.setattr(queues_module, "demand", lambda *a: own.append(a) or real_q(*a))
            monkeypatch.setattr(workspace_module, "demand", lambda *a: found.append(a) or real_w(*a))
            got = queues_module.try_place(given, view, want, need)
            monkeypatch.undo()
            # (under queue definitions `choose` asks `find` without it: not a busy LAS pass's path)
            assert got == expected and not own and (queued or not found), (queued, jid)
        assert given.allocations == plain.allocations and given.total_free == plain.total_free


def test_try_place_under_quotas_checks_the_need_it_is_handed(monkeypatch: pytest.MonkeyPatch) -> None:
    snap = replace(snapshot(cluster(2, 4), pending("p", 3)), queues=QUEUES)
    ws = Workspace(snap)
    seen: list[Resources] = []
    real = QueueBook.hard_quota_blocks
    monkeypatch.setattr(QueueBook, "hard_quota_blocks", lambda book, j, need: seen.append(need) or real(book, j, need))
    p = snap.jobs["p"]
    need = demand(p.spec, {Role.WORKER: 3})
    queues_module.try_place(ws, p, {Role.WORKER: 3}, need)
    assert len(seen) == 1 and seen[0] is need


# -- the trial in _evict_for ---------------------------------------------------------------------
def _claimant_case(queued: bool, fits: bool) -> tuple[Workspace, SameClassLowerRank, JobView]:
    """A holder ranked after a claimant of its class; the claimant fits as is (`fits`) or only by evicting."""
    views = [running("h", 4, on="n0"), pending("p", 4 if not fits else 2)]
    if not fits:
        views.append(running("g", 4, on="n1"))
    snap = snapshot(cluster(2, 4), *views)
    if queued:
        snap = replace(snap, queues=QUEUES)
    ws = Workspace(snap)
    ws.rank.update({"p": 0, "h": 1, "g": 2})
    p = snap.jobs["p"]
    ws.want["p"] = {Role.WORKER: p.spec.roles[Role.WORKER].min}
    return ws, SameClassLowerRank(ws, [p]), p


@pytest.mark.parametrize("queued", [False, True])
@pytest.mark.parametrize("fits", [False, True])
def test_evict_for_opens_a_trial_before_an_as_is_start_only_under_queue_definitions(
        monkeypatch: pytest.MonkeyPatch, queued: bool, fits: bool) -> None:
    ws, rule, p = _claimant_case(queued, fits)
    opened: list[int] = []
    real = Workspace.trial

    def spied(self: Workspace) -> Any:
        opened.append(len(self.allocations))
        return real(self)

    monkeypatch.setattr(Workspace, "trial", spied)
    evicted = preemption._evict_for(rule, ws, p, None, {})
    assert evicted is not None and "p" in ws.allocations and not ws._trials
    if fits:
        assert evicted == [] and len(opened) == (1 if queued else 0)
    else:  # (as is it failed: the trial opens once, before any eviction (the last ranked), with nothing moved)
        assert [v.id for v, _, _ in evicted] == ["g"] and opened == [len(ws.snap.jobs) - 1]


def test_an_as_is_start_without_a_trial_is_undone_by_an_enclosing_one() -> None:
    """Kept as is without a trial of its own, the start is recorded where the trial would have put it."""
    ws, rule, p = _claimant_case(False, True)
    outer = ws.trial()
    free, total = dict(ws.free), ws.total_free
    assert preemption._evict_for(rule, ws, p, None, {}) == []
    assert "p" in ws.allocations
    outer.discard()
    assert "p" not in ws.allocations and ws.free == free and ws.total_free == total


# -- the implicit queue --------------------------------------------------------------------------
@pytest.mark.parametrize("queued", [False, True])
def test_las_classes_read_the_queue_as_queue_of(queued: bool) -> None:
    rng = random.Random(20)
    names = ["prod", "research", "nowhere", ""]
    views = []
    for k in range(40):
        spec = job(f"h{k}", 1, priority=rng.randint(0, 2), queue=rng.choice(names))
        views.append(running(f"h{k}", 1, on=f"n{k % 10}", spec=spec))
    claimants = [pending(f"p{k}", 1, spec=job(f"p{k}", 1, priority=rng.randint(0, 2), queue=rng.choice(names)))
                 for k in range(20)]
    snap = snapshot(cluster(10, 4), *views, *claimants)
    if queued:
        snap = replace(snap, queues=QUEUES)
    ws = Workspace(snap)
    ws.rank.update({v.id: i for i, v in enumerate([*claimants, *views])})
    rule = SameClassLowerRank(ws, claimants)
    expected = {(ws.queue_of(v), v.spec.priority) for v in views}
    assert set(rule.ids) == expected
    for key, ids in rule.ids.items():
        assert all((ws.queue_of(snap.jobs[jid]), snap.jobs[jid].spec.priority) == key for jid in ids)
    for c in claimants:
        found = rule._class(c)
        key = (ws.queue_of(c), c.spec.priority)
        assert (found is None) == (key not in rule.ranks) and (found is None or found[0] == key)
    assert queued or set(k for k, _ in expected) == {""}


# -- fair_order, any_adaptive ----------------------------------------------------------------------
def test_fair_order_without_queues_is_the_list_itself() -> None:
    jobs = [pending(f"p{k}") for k in range(5)]
    order = fairshare.fair_order(None, jobs)
    assert not isinstance(order, types.GeneratorType)
    assert next(order) is jobs[0] and [*order] == jobs[1:]
    book = QueueBook(replace(snapshot(cluster(1, 4), *jobs), queues={}), {})
    assert list(fairshare.fair_order(book, jobs)) == jobs
    queued = QueueBook(replace(snapshot(cluster(1, 4), *jobs), queues=QUEUES), {})
    assert isinstance(fairshare.fair_order(queued, jobs), types.GeneratorType)  # (read as each job is asked for)


def test_any_adaptive_as_the_generator() -> None:
    rng = random.Random(7)
    for _ in range(200):
        views = [pending(f"j{k}", adaptive_batch=BatchRange(16, 256, 32) if rng.random() < 0.05 else None)
                 for k in range(rng.randint(0, 12))]
        snap = snapshot(cluster(1, 4), *views)
        ids = [f"j{rng.randint(0, 14)}" for _ in range(rng.randint(0, 12))]
        expected = any(j.spec.adaptive_batch is not None for j in map(snap.jobs.get, ids) if j is not None)
        assert goodput.any_adaptive(snap, ids) is expected


# -- the fit index against `_fit_key` ----------------------------------------------------------------
def test_fit_index_keys_and_tightest_as_by_fit_key() -> None:
    rng = random.Random(15)
    names = [f"n{k}" for k in range(30)]
    free = {n: Resources(cpu=rng.randint(0, 48_000), memory=2**30, gpu=rng.randint(0, 8)) for n in names}
    index = _FitIndex(free, names)
    for _ in range(400):
        n = rng.choice(names)
        free[n] = Resources(cpu=rng.randint(-1_000, 48_000), memory=rng.randint(0, 2**31), gpu=rng.randint(0, 8))
        index.update(n)
        assert index.keys[n] == _fit_key(free[n].gpu, free[n].cpu, names.index(n))
        assert index.order == sorted(_fit_key(free[m].gpu, free[m].cpu, names.index(m)) for m in names)
        need = Resources(cpu=rng.randint(0, 40_000), memory=rng.randint(0, 2**30), gpu=rng.randint(0, 8))
        allowed = frozenset(rng.sample(names, 20))
        fitting = [m for m in names if m in allowed and need.fits_in(free[m])]
        expected = min(fitting, key=lambda m: (free[m].gpu, free[m].cpu, names.index(m)), default=None)
        assert index.tightest(need, allowed) == expected


# -- no cells in the search path ------------------------------------------------------------------
def test_search_path_builds_no_cells() -> None:
    for f in (Workspace.find, Workspace._find, ClusterMemo.pool, Allocation.gpus, Allocation.per_node,
              Allocation.remember, preemption._evict_for, preemption._place, queues_module.try_place):
        assert f.__code__.co_cellvars == (), f.__qualname__


def test_find_with_preferred_and_held_nodes_and_several_roles() -> None:
    """The moved-out comprehensions: a preferred node first, what a job holds counted as free, a gang of two
    roles on one node, a spread over the nodes with what is held counted."""
    cl = cluster(3, 4)
    a = running("a", 2, on="n1")
    ps = pending("s", spec=with_ps(job("s", 2)))
    snap = snapshot(cl, a, running("b", 3, on="n0"), ps)
    ws = Workspace(snap)
    got = ws.find(a, {Role.WORKER: 4}, prefer=["nX", "n1", "n2", "n1"])
    assert got == Allocation.of([Placement(Role.WORKER, "n1")] * 4)  # (n1: its own 2 free for it)
    # (n0, preferred, has one GPU free: the tightest fit instead, n1 with its own two counted, first on the tie)
    assert ws.find(a, {Role.WORKER: 2}, prefer=["n0"]) == Allocation.of([Placement(Role.WORKER, "n1")] * 2)
    two = ws.find(ps, {Role.WORKER: 2, Role.PS: 1})
    assert two is not None and len(two.nodes) == 1 and two.count(Role.PS) == 1 and two.count(Role.WORKER) == 2
    spread = ws.find(a, {Role.WORKER: 8})  # (more than one node: spread, its own 2 on n1 counted)
    assert spread is not None and spread.count(Role.WORKER) == 8 and set(spread.nodes) == {"n1", "n2"}
    assert workspace_module._with_held(ws.free, a.allocation.per_node(a.spec), ["n0", "n1", "nX"]) == {
        "n0": ws.free["n0"], "n1": Resources(gpu=4) + (ws.free["n1"] - Resources(gpu=2))}
    assert list(ClusterMemo(cl).pool(a.spec).nodes) == list(cl.nodes)


# -- one memo per allocation ------------------------------------------------------------------------
def _fresh(alloc: Allocation) -> Allocation:
    return Allocation(alloc.tasks)


def test_allocation_memo_as_computed_for_any_spec_order() -> None:
    rng = random.Random(18)
    specs = [job("x", 1), with_ps(job("y", 1)), job("z", 1, per_task=Resources(cpu=3, memory=5, gpu=2))]
    nodes = ["n0", "n1", "n2"]
    for _ in range(300):
        tasks = [Placement(rng.choice([Role.WORKER, Role.PS]), rng.choice(nodes)) for _ in range(rng.randint(0, 5))]
        alloc = Allocation.of(tasks)
        for _ in range(6):
            spec = rng.choice(specs)
            if any(r not in spec.roles for r in alloc.role_counts):
                continue
            ask = rng.choice(["per_node", "resources", "gpus"])
            ref = getattr(_fresh(alloc), ask)(spec)
            got = getattr(alloc, ask)(spec)
            assert got == ref and type(got) is type(ref), ask
            if ask == "per_node":
                assert list(got.items()) == list(ref.items())
                assert alloc.per_node(spec) is got  # (kept for the last spec asked about)
    spec = specs[0]
    need = Resources(gpu=2)
    placed = on_node(Role.WORKER, "n1", 2).remember(spec, {"n1": need}, need)
    assert placed.per_node(spec) == {"n1": need} and placed.resources(spec) is need and placed.gpus(spec) == 2
    assert [k for k in placed.__dict__ if k != "tasks"] == ["_memo"]  # (one object, not three)
    other = specs[2]
    assert placed.gpus(other) == 4 and placed.resources(other) == Resources(cpu=6, memory=10, gpu=4)
    assert placed.per_node(spec) == {"n1": need}  # (asked again for the first spec: computed again, equal)


def test_busy_decision_plans_alike_with_the_old_memo_keys_absent() -> None:
    """Two busy decisions (1,500 pending) plan alike on the same snapshot: the second reads the first's memos."""
    snap: Snapshot = bench_snapshot(busy=True, pending=1500)
    policy = make_policy("trainmaster")
    first = policy.decide(snap)
    assert policy.decide(snap) == first
    assert make_policy("trainmaster").decide(snap) == first


def test_evict_for_asks_a_claimants_demand_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The LAS rule's claimant: `demand` once for the room test, handed down to `find` through `try_place`."""
    calls: list[object] = []
    real = workspace_module.demand
    for fits in (True, False):
        ws, rule, p = _claimant_case(False, fits)
        calls.clear()
        for module in (preemption, queues_module, workspace_module):
            monkeypatch.setattr(module, "demand", lambda *a: calls.append(a) or real(*a))
        assert preemption._evict_for(rule, ws, p, None, {}) is not None
        monkeypatch.undo()
        assert len(calls) == 1, fits


def test_preferred_nodes_in_the_pool_and_the_workspace_once_in_order() -> None:
    cl = cluster(4, 4)
    pool = workspace_module.EligibleNodes([cl.nodes[0], cl.nodes[2], cl.nodes[3]])
    free = {n.name: n.capacity for n in cl.nodes[:3]}
    assert workspace_module._preferred(["n2", "n1", "nX", "n3", "n0", "n2"], pool, free) == ["n2", "n0"]
