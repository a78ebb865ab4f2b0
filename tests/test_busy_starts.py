"""Session 17 (tir17): the busy decision's starts, cut exactly.

The fit index' tightest node is found by position (no `islice` stepping to the bisected start) and moved without
tuples built to compare; a one-node gang is built by `allocation.on_node` (no frozen `__init__` frames, no sort);
`Allocation.of` sorts by a C-level key; `find`'s misfit memo keys a task by its fields (no `Resources.__hash__`
frame) and takes the claimant's `need` from preemption, which asks its room test in integers. Each is checked
against the reference it replaces; the recorded plans (`test_recorded_plans.py`) pin the schedules.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pytest
from tests.builders import cluster, pending, running, snapshot

from trainmaster.core.allocation import Allocation, Placement, on_node
from trainmaster.core.job import Role
from trainmaster.core.resources import Resources
from trainmaster.policies import preemption
from trainmaster.policies.preemption import LowerRank, preempt_lower
from trainmaster.policies.snapshot import JobView
from trainmaster.policies.workspace import _CPU_FLOOR, _POSITION_MASK, Workspace, _fit_key, _FitIndex, demand


# -- the fit index --------------------------------------------------------------------------------
def _tightest_by_scan(free: dict[str, Resources], names: list[str], need: Resources,
                      allowed: frozenset[str]) -> str | None:
    """The reference: fewest free GPUs, then CPUs, then first in cluster order, among the nodes that hold `need`."""
    fits = [(free[n].gpu, free[n].cpu, i, n) for i, n in enumerate(names)
            if need.fits_in(free[n]) and n in allowed]
    return min(fits)[3] if fits else None


def test_tightest_is_the_scan_on_random_free_maps() -> None:
    """Random free capacity on 60 nodes (most with no GPU free, as on a busy cluster; CPU and memory short on
    some), random demands and allowed sets; and after random updates of the index."""
    rng = random.Random(17)
    names = [f"n{i}" for i in range(60)]
    for _ in range(200):
        free = {n: Resources(rng.choice((0, 0, 1000, 4000, 8000)), rng.choice((0, 2**30, 2**34)),
                             rng.choice((0, 0, 0, 1, 2, 3, 4, 8))) for n in names}
        index = _FitIndex(free, names)
        for _ in range(20):
            moved = rng.choice(names)
            free[moved] = Resources(rng.choice((0, 4000)), rng.choice((0, 2**34)), rng.randint(0, 8))
            index.update(moved)
            need = Resources(rng.choice((0, 1000, 4000)), rng.choice((0, 2**30)), rng.randint(0, 5))
            allowed = frozenset(n for n in names if rng.random() < 0.9)
            assert index.tightest(need, allowed) == _tightest_by_scan(free, names, need, allowed)
        assert index.order == sorted(index.keys.values())  # (moved in place: still sorted, one key per node)
        assert index.keys == {n: _fit_key(free[n].gpu, free[n].cpu, i) for i, n in enumerate(names)}
        assert all(index.position(n) == i and index.names[i] == n for i, n in enumerate(names))


def test_tightest_past_the_last_entry_is_none() -> None:
    free = {"a": Resources(gpu=2), "b": Resources(gpu=0)}
    index = _FitIndex(free, ["a", "b"])
    assert index.tightest(Resources(gpu=3), frozenset("ab")) is None
    assert index.tightest(Resources(gpu=2), frozenset("ab")) == "a"
    assert index.tightest(Resources(gpu=2), frozenset("b")) is None


def test_update_of_the_cpu_alone_moves_the_key() -> None:
    """Same GPUs, other CPU: the key moves (the comparison reads both fields); same both: nothing moves."""
    free = {"a": Resources(4000, 0, 1), "b": Resources(2000, 0, 1)}
    index = _FitIndex(free, ["a", "b"])
    assert index.order == [_fit_key(1, 2000, 1), _fit_key(1, 4000, 0)]
    free["a"] = Resources(1000, 0, 1)
    index.update("a")
    assert index.order == [_fit_key(1, 1000, 0), _fit_key(1, 2000, 1)] and index.keys["a"] == _fit_key(1, 1000, 0)
    order = list(index.order)
    free["a"] = Resources(1000, 2**30, 1)  # (memory is not in the key)
    index.update("a")
    assert index.order == order and index.keys["a"] == _fit_key(1, 1000, 0)


def test_fit_keys_sort_as_their_tuples() -> None:
    """The packed key orders as (gpu, cpu, position) across the whole stated range: negative free capacity (an
    overfilled node), CPU near +-2**63, positions up to 2**32 - 1; and gives the position back."""
    rng = random.Random(1717)
    edges = (0, 1, -1, 2**62, -(2**62), 2**63 - 1, -(2**63))
    rows = []
    for _ in range(3000):
        gpu = rng.choice((0, 1, 8, -1, 2**20, rng.randint(-(2**40), 2**40)))
        cpu = rng.choice((*edges, rng.randint(-(2**63), 2**63 - 1)))
        position = rng.choice((0, 1, 2**32 - 1, rng.randint(0, 2**32 - 1)))
        rows.append((gpu, cpu, position))
    assert sorted(rows) == sorted(rows, key=lambda t: _fit_key(*t))
    assert all(_fit_key(*t) & _POSITION_MASK == t[2] for t in rows)
    assert all(_fit_key(g, _CPU_FLOOR, 0) <= _fit_key(g, c, p) < _fit_key(g + 1, _CPU_FLOOR, 0) for g, c, p in rows)


# -- building allocations -----------------------------------------------------------------------
@pytest.mark.parametrize("role", list(Role))
def test_on_node_is_of(role: Role) -> None:
    for n in range(5):
        fast, ref = on_node(role, "n7", n), Allocation.of(Placement(role, "n7") for _ in range(n))
        assert type(fast) is Allocation and fast == ref and hash(fast) == hash(ref) and fast.tasks == ref.tasks
        assert all(type(t) is Placement and t == Placement(role, "n7") for t in fast.tasks)
        assert fast.role_counts == ref.role_counts and fast.nodes == ref.nodes and bool(fast) is bool(ref)
    spec = pending("j", 3).spec
    need = demand(spec, {Role.WORKER: 3})
    alloc = on_node(Role.WORKER, "n1", 3).remember(spec, {"n1": need}, need)
    assert alloc.per_node(spec) == {"n1": need} and alloc.gpus(spec) == 3


def test_spread_falls_back_to_the_greedy_fill(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the even spread fails, the gang goes where the greedy fill put it (most free first), as placements.
    (`_spread`'s own placements: a one-role gang goes by `_spread_one` with `lean_spread`, tir19's tests.)"""
    monkeypatch.setattr(Workspace, "lean_spread", False)
    cl = cluster(3, 4)
    snap = snapshot(cl, running("r", 3, on="n0"), running("s", 1, on="n1"), pending("g", 5))
    ws = Workspace(snap)
    spec = snap.jobs["g"].spec
    counts = {Role.WORKER: 5}
    even = ws._spread(spec, counts, dict(ws.free), [])
    assert even is not None and even.role_counts == {Role.WORKER: 5}
    monkeypatch.setattr(Workspace, "_even", staticmethod(lambda *args: None))
    greedy = ws._spread(spec, counts, dict(ws.free), [])
    assert greedy == Allocation.of([Placement(Role.WORKER, "n2")] * 4 + [Placement(Role.WORKER, "n1")])
    assert greedy is not None and all(type(t) is Placement for t in greedy.tasks)


def test_of_sorts_as_placement_order() -> None:
    """`Allocation.of` by its C-level key: the order `Placement.__lt__` gives, on random multisets."""
    rng = random.Random(71)
    for _ in range(300):
        tasks = [Placement(rng.choice(list(Role)), f"n{rng.randint(0, 12)}") for _ in range(rng.randint(0, 12))]
        assert Allocation.of(tasks).tasks == tuple(sorted(tasks))
        assert Allocation.of(iter(tasks)) == Allocation(tuple(sorted(tasks)))


# -- find: the misfit memo's key and a given need ---------------------------------------------------
def _searches(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []
    real = Workspace._find

    def spied(ws: Workspace, job: JobView, *args: Any) -> Allocation | None:
        calls.append(job.id)
        return real(ws, job, *args)

    monkeypatch.setattr(Workspace, "_find", spied)
    return calls


def test_misfit_memo_keys_a_task_by_its_fields(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two jobs whose tasks are equal `Resources` (different objects) share a misfit; another task does not;
    a release (capacity grew) forgets it."""
    cl = cluster(2, 4)
    snap = snapshot(cl, running("r", 3, on="n0"), running("s", 3, on="n1"), pending("a", 1, per_task=Resources(gpu=2)),
                    pending("b", 1, per_task=Resources(gpu=2)), pending("c", 1))
    a, b, c = snap.jobs["a"], snap.jobs["b"], snap.jobs["c"]
    assert a.spec.roles[Role.WORKER].resources is not b.spec.roles[Role.WORKER].resources
    calls = _searches(monkeypatch)
    ws = Workspace(snap)
    one = {Role.WORKER: 1}
    assert ws.find(a, one) is None and ws.find(b, one) is None  # (2 GPUs free in all, one a node)
    assert calls == ["a"]  # b: the same shape, nothing grew since
    assert ws.find(c, one) is not None and calls == ["a", "c"]  # another task
    ws.release(snap.jobs["r"])
    assert ws.find(b, one) is not None and calls == ["a", "c", "b"]


def test_find_reads_a_given_need() -> None:
    """`need` given is the need searched for (it is not computed again); the right one plans as without it."""
    cl = cluster(2, 4)
    snap = snapshot(cl, running("r", 2, on="n0"), pending("p", 2))
    p, want = snap.jobs["p"], {Role.WORKER: 2}
    ws = Workspace(snap)
    assert ws.find(p, want, need=demand(p.spec, want)) == ws.find(p, want)
    assert ws.find(p, want, need=Resources(gpu=64)) is None  # (more than the free total: read, so refused)


# -- preemption: the room test in integers, the need handed to find ------------------------------
def _claimant_snap(extra: Resources) -> tuple[Any, Resources]:
    """n0 full of a low-ranked running job (4 GPUs), a claimant ranked first whose one task asks one GPU and
    `extra`; so the room test (free + what ranks below it) passes or not by one unit per field."""
    cl = cluster(1, 4)
    task = Resources(extra.cpu, extra.memory, 1 + extra.gpu)
    claimant = pending("c", 1, per_task=task)
    victim = running("v", 4, on="n0", submit=5.0, attained=1e9, per_task=Resources(1000, 2**30, 1))  # (room in each)
    return snapshot(cl, claimant, victim), cl.nodes[0].capacity


@pytest.mark.parametrize("field", ["cpu", "memory", "gpu"])
def test_room_test_is_fits_in_of_the_sum(field: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A claimant needing exactly the node (free + the victim's) starts by evicting; one unit more in any field
    is refused before any eviction, as `fits_in(total_free + room)` says."""
    for over, starts in ((0, True), (1, False)):
        _, node = _claimant_snap(Resources())
        cap = node.cpu if field == "cpu" else node.memory if field == "memory" else node.gpu - 1
        extra = Resources(**{field: cap + over})
        snap, _ = _claimant_snap(extra)
        ws = Workspace(snap, empty=True)
        ws.rank = {"c": 0, "v": 1}
        ws.want = {"c": {Role.WORKER: 1}, "v": {Role.WORKER: 4}}
        ws.assign(snap.jobs["v"], snap.jobs["v"].allocation)
        rule = LowerRank(ws)
        released: list[str] = []
        real = Workspace.release

        def spied(self: Workspace, job: JobView, _released: list[str] = released,
                  _real: Any = real) -> Allocation | None:
            _released.append(job.id)
            return _real(self, job)

        monkeypatch.setattr(Workspace, "release", spied)
        out = preemption._evict_for(rule, ws, snap.jobs["c"], None, {})
        monkeypatch.undo()
        assert (out is not None) is starts
        assert released == (["v"] if starts else [])


@pytest.mark.parametrize("lean", [True, False])
def test_evict_for_hands_its_need_to_find(monkeypatch: pytest.MonkeyPatch, lean: bool) -> None:
    """The claimant's `demand` is computed once, in `_evict_for`, and each `find` (as is, then after an eviction)
    is handed that very object. (rep21: with `lean_misfit`, a need beyond the free total is not tried as is: one
    `find`, after the eviction.)"""
    monkeypatch.setattr(preemption.VictimRule, "lean_misfit", lean)
    cl = cluster(1, 4)
    snap = snapshot(cl, pending("c", 2), running("v", 4, on="n0", submit=5.0, attained=1e9))
    ws = Workspace(snap, empty=True)
    ws.rank, ws.want = {"c": 0, "v": 1}, {"c": {Role.WORKER: 2}, "v": {Role.WORKER: 4}}
    ws.assign(snap.jobs["v"], snap.jobs["v"].allocation)
    given: list[Resources | None] = []
    real_find = Workspace.find

    def spied(self: Workspace, job: JobView, counts: Any, prefer: Any = (), *,
              need: Resources | None = None) -> Allocation | None:
        given.append(need)
        return real_find(self, job, counts, prefer, need=need)

    computed: list[Resources] = []
    real_demand = preemption.demand

    def counted(spec: Any, counts: Any) -> Resources:
        computed.append(out := real_demand(spec, counts))
        return out

    monkeypatch.setattr(Workspace, "find", spied)
    monkeypatch.setattr(preemption, "demand", counted)
    assert preemption._evict_for(LowerRank(ws), ws, snap.jobs["c"], None, {}) is not None
    assert len(computed) == 1 and len(given) == (1 if lean else 2) and all(n is computed[0] for n in given)


def _busy(n: int) -> Iterator[JobView]:
    for i in range(n):
        yield running(f"r{i}", 4, on=f"n{i // 2}", submit=float(i), attained=1e9 if i % 2 else 0.0)


def test_busy_preemption_starts_claimants_on_one_node() -> None:
    """A small busy cluster: preemption starts one-GPU claimants on single nodes (`on_node`), evicting low-ranked
    jobs, and each start is an allocation equal to the reference build."""
    cl = cluster(6, 8)
    jobs = [*_busy(12), *(pending(f"p{i}", 1, submit=100.0 + i) for i in range(10))]
    snap = snapshot(cl, *jobs)
    ws = Workspace(snap, empty=True)
    ws.rank = {j.id: k for k, j in enumerate(sorted(jobs, key=lambda j: (j.attained > 1, j.submit_time)))}
    ws.want = {j.id: {Role.WORKER: j.spec.roles[Role.WORKER].min} for j in jobs}
    for j in jobs:
        if j.allocation:
            ws.assign(j, j.allocation)
    preempt_lower(snap, [j for j in jobs if not j.allocation], ws)
    started = {jid: a for jid, a in ws.allocations.items() if jid.startswith("p")}
    assert len(started) == 10
    for a in started.values():
        (task,) = a.tasks
        assert a == Allocation.of([Placement(Role.WORKER, task.node)])


def test_holding_some_by_the_index_is_the_scan() -> None:
    """`_holding_some` read off the fit index (nodes with enough free GPUs, in cluster order) gives the very dict,
    order included, that the scan over the pool gives; on random free maps, some nodes overfilled (negative CPU)."""
    rng = random.Random(1729)
    cl = cluster(40, 8)
    for _ in range(60):
        snap = snapshot(cl, pending("g", rng.choice((1, 2, 8)), per_task=Resources(rng.choice((0, 500)), 0,
                                                                                     rng.randint(0, 3))))
        ws = Workspace(snap)
        for name in ws.free:
            ws.free[name] = Resources(rng.choice((-4000, 0, 1000, 8000)), 2**34, rng.choice((0, 0, 0, 1, 2, 4, 8)))
        spec = snap.jobs["g"].spec
        counts = {Role.WORKER: spec.roles[Role.WORKER].min}
        pool = ws.memo.pool(spec)
        scanned = ws._holding_some(spec, counts, pool)
        ws._fit = _FitIndex(ws.free, (n.name for n in cl.nodes))
        indexed = ws._holding_some(spec, counts, pool)
        assert list(indexed.items()) == list(scanned.items())
