"""Session 21 (rep23): trainmaster's busy decision -- the as-is start in one frame (`Workspace.start`).

`Workspace.start` is `find` then `assign`, the one copy of the start without quotas (`queues.try_place` without
queue definitions, `preemption._place` outside quotas); with `lean_start` its common case -- a one-role gang of a
job holding nothing here, tightest fit, the fit index in use, one node holding it -- is `_start_lean`, one frame
for the search and the take. Each is tested here against the reference (`lean_start` False: `find`, then
`_set`); the pinned plan digests (`test_recorded_plans.py`, `test_trainmaster_busy_reads.py`) check the decisions
as a whole.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from bench.decision_time import snapshot as bench_snapshot
from tests.builders import cluster, job, pending, running, snapshot, with_ps

from trainmaster.core.allocation import Allocation
from trainmaster.core.job import Role
from trainmaster.core.resources import Resources
from trainmaster.policies import preemption, queues
from trainmaster.policies.las import SameClassLowerRank
from trainmaster.policies.registry import make_policy
from trainmaster.policies.snapshot import JobView, Plan, Snapshot
from trainmaster.policies.workspace import Workspace, _fit_key, _FitIndex


def _state(ws: Workspace) -> tuple[Any, ...]:
    """Everything a start may change, by value (and the order of the entries)."""
    fit = ws._fit
    index = None if fit is None else (dict(fit.keys), list(fit.order), dict(fit.names))
    undo = [[(j.id, a) for j, a in t.undo] for t in ws._trials]
    return (dict(ws.free), ws.total_free, list(ws.allocations.items()), set(ws._assigned), dict(ws._misfits),
            ws._grown, ws._scans, index, undo)


def _memo(alloc: Allocation | None, spec: Any) -> Any:
    if alloc is None:
        return None
    return alloc._memo and (alloc._memo[0] is spec, alloc._memo[1:]), alloc.per_node(spec), alloc.gpus(spec)


def _random_case(rng: random.Random) -> tuple[Snapshot, list[JobView]]:
    nodes, gpus = rng.randint(3, 9), rng.choice((2, 4, 8))
    cl = cluster(nodes, gpus)
    jobs: list[JobView] = []
    used = [0] * nodes
    for k in range(rng.randint(0, 2 * nodes)):
        at = rng.randrange(nodes)
        n = rng.randint(1, gpus)
        if used[at] + n <= gpus:
            used[at] += n
            jobs.append(running(f"r{k}", n, on=f"n{at}"))
    todo = [pending(f"p{k}", rng.choice((1, 1, 2, gpus, gpus + 1, 2 * gpus))) for k in range(rng.randint(4, 16))]
    if rng.random() < 0.3:
        todo.append(pending("ps", spec=with_ps(job("ps", 2))))  # (two roles: `find`'s way)
    return snapshot(cl, *jobs, *todo), todo


def _start_all(ws: Workspace, todo: list[JobView], given_need: bool) -> list[Any]:
    out = []
    for view in todo:
        counts = {role: s.min for role, s in view.spec.roles.items()}
        need = None
        if given_need:
            need = Resources()
            for role, n in counts.items():
                need = need + view.spec.roles[role].resources * n
        got = ws.start(view, counts, need)
        out.append((view.id, got, _memo(got, view.spec), _state(ws)))
    return out


@pytest.mark.parametrize("given_need", [False, True])
def test_lean_start_leaves_what_find_then_assign_leaves(given_need: bool) -> None:
    """On 150 random workspaces (one-role gangs that fit on one node, spread, do not fit; a two-role gang; in and
    out of a trial, which is then discarded): every start hands back the allocation the reference does, with the
    same memos, and leaves the same free capacity, total, fit index, entries (in order), misfits and undo."""
    rng = random.Random(23 + given_need)
    lean_taken = 0
    for _ in range(150):
        snap, todo = _random_case(rng)
        split, in_trial = rng.randrange(len(todo) + 1), rng.random() < 0.5
        results = []
        for lean in (True, False):
            ws = Workspace(snap)
            ws.lean_start = lean
            steps = _start_all(ws, todo[:split], given_need)
            trial = ws.trial() if in_trial else None
            steps += _start_all(ws, todo[split:], given_need)
            if trial is not None:
                trial.discard()
            results.append((steps, _state(ws)))
            if lean:
                lean_taken += sum(1 for _, got, _m, _s in steps if got is not None and got.on_one_node)
        assert results[0] == results[1]
    assert lean_taken > 300  # (the lean path was the one taken)


def test_lean_release_leaves_what_set_leaves() -> None:
    """On 150 random workspaces, after the starts: releases (in and out of a trial, which is then discarded) of
    running and started jobs, with the per-node memo at hand or not, leave what `_set(job, None)` leaves (free
    capacity, total, fit index, entries in order, undo, `_grown`) and hand back the same allocation."""
    rng = random.Random(231)
    lean_taken = 0
    for _ in range(150):
        snap, todo = _random_case(rng)
        views = list(snap.jobs.values())
        order = rng.sample(views, len(views))
        warm = {v.id for v in views if rng.random() < 0.7}
        in_trial = rng.random() < 0.5
        results = []
        for lean in (True, False):
            for v in views:  # (the memo a victim's class sums leave; each side alike)
                object.__setattr__(v.allocation, "_memo", None)
                if v.id in warm and v.allocation.tasks:
                    v.allocation.per_node(v.spec)
            ws = Workspace(snap)
            ws.lean_start = lean
            _start_all(ws, todo, False)
            trial = ws.trial() if in_trial else None
            steps = []
            for v in order:
                memo = ws.allocations.get(v.id) and ws.allocations[v.id]._memo
                lean_taken += bool(lean and memo and memo[0] is v.spec and memo[1] is not None and len(memo[1]) == 1)
                steps.append((v.id, ws.release(v), _state(ws)))
            if trial is not None:
                trial.discard()
            results.append((steps, _state(ws)))
        assert results[0] == results[1]
    assert lean_taken > 300


def test_lean_release_reads_no_memo_of_another_spec() -> None:
    """An allocation whose memo was filled for another spec (2-GPU tasks) gives back what its job's own tasks
    take, as `_set` does (the memo is read only for the job's very spec)."""
    snap = snapshot(cluster(2, 4), running("r", 2, on="n0"), pending("x", 1))
    r = snap.jobs["r"]
    other = job("o", 1, per_task=Resources(cpu=1000, memory=2**30, gpu=2))
    assert r.allocation.per_node(other)["n0"].gpu == 4
    ws = Workspace(snap)
    assert ws.release(r) == r.allocation
    assert ws.free["n0"] == snap.cluster.node("n0").capacity and ws.total_free == snap.cluster.total


def test_lean_start_in_a_trial_is_undone_alike() -> None:
    """A start inside a trial records (job, None) as `_set` does: discarding it gives the workspace back as it was,
    the free total, the fit index and the entries alike."""
    snap = snapshot(cluster(3, 4), running("r", 3, on="n0"), pending("a", 1), pending("b", 2), pending("c", 4))
    ws = Workspace(snap)
    assert ws.start(snap.jobs["a"], {Role.WORKER: 1}) is not None  # (the first search scans: the index after)
    before = _state(ws)
    trial = ws.trial()
    for jid in ("b", "c"):
        assert ws.start(snap.jobs[jid], {Role.WORKER: snap.jobs[jid].spec.roles[Role.WORKER].min}) is not None
    assert [j.id for j, old in trial.undo] == ["b", "c"] and all(old is None for _, old in trial.undo)
    trial.discard()
    assert _state(ws)[:3] == before[:3]  # (`_assigned` keeps its ids and `_grown` counts the undoing, as `_set`)
    assert ws._fit is not None and ws._fit.order == sorted(ws._fit.keys.values())


def _spy(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str, calls: list[Any]) -> None:
    real = getattr(owner, name)

    def spied(*args: Any, **kwargs: Any) -> Any:
        out = real(*args, **kwargs)
        calls.append(out)
        return out

    monkeypatch.setattr(owner, name, spied)


def test_lean_start_hands_back_undecided_cases_to_find(monkeypatch: pytest.MonkeyPatch) -> None:
    """No task, a gang no node holds alone (a spread): `_start_lean` says False with nothing changed and `find`
    decides; a gang beyond the free total and a known misfit: None at once, `find` not asked."""
    snap = snapshot(cluster(3, 4), running("r", 3, on="n0"), running("s", 2, on="n1"), pending("a", 1),
                    pending("w", 5), pending("big", 9), pending("z", 1))
    ws = Workspace(snap)
    assert ws.start(snap.jobs["a"], {Role.WORKER: 1}) is not None  # (scans: the fit index from here on)
    lean: list[Any] = []
    finds: list[Any] = []
    _spy(monkeypatch, Workspace, "_start_lean", lean)
    _spy(monkeypatch, Workspace, "find", finds)
    before = _state(ws)[:7]  # (the fit index aside: built by the first search after a scan, as `find` builds it)
    assert ws._start_lean(snap.jobs["z"], {Role.WORKER: 0}, None) is False and _state(ws)[:7] == before
    assert ws._start_lean(snap.jobs["w"], {Role.WORKER: 5}, None) is False and _state(ws)[:7] == before
    spread = ws.start(snap.jobs["w"], {Role.WORKER: 5})  # (n1's 2 and n2's 4 free: `find`'s spread)
    assert spread is not None and len(spread.nodes) == 2 and len(finds) == 1
    assert ws.start(snap.jobs["big"], {Role.WORKER: 9}) is None and lean[-1] is None and len(finds) == 1


def test_lean_start_reads_the_misfit_memo_as_find_does(monkeypatch: pytest.MonkeyPatch) -> None:
    """A gang shape that did not fit since capacity last grew is not searched again (None, the index not asked);
    after a release it is, and starts."""
    two = Resources(cpu=1000, memory=2**30, gpu=2)
    snap = snapshot(cluster(3, 4), running("r", 3, on="n0"), running("s", 3, on="n1"), running("t", 3, on="n2"),
                    pending("a", 1), pending("b", 1, per_task=two), pending("c", 1, per_task=two))
    ws = Workspace(snap)
    one = {Role.WORKER: 1}
    assert ws.start(snap.jobs["a"], one) is not None  # (a scan; 2 GPUs free, one a node, from here on)
    searched: list[Any] = []
    _spy(monkeypatch, _FitIndex, "tightest", searched)
    assert ws.start(snap.jobs["b"], one) is None and len(searched) == 2  # (`_start_lean`'s, then `find`'s)
    assert ws.start(snap.jobs["c"], one) is None and len(searched) == 2  # (the misfit: no search)
    ws.release(snap.jobs["s"])
    got = ws.start(snap.jobs["c"], one)
    assert got is not None and got.nodes == ("n1",) and len(searched) == 3


def test_start_is_one_frame_without_cells() -> None:
    for f in (Workspace.start, Workspace._start_lean, preemption._place, queues.try_place):
        assert f.__code__.co_cellvars == (), f.__qualname__


def test_fit_index_keys_written_out_are_fit_key() -> None:
    """`_FitIndex.update` and `tightest` write `_fit_key` out: the keys after random starts and releases are
    `_fit_key`'s, the order sorted."""
    rng = random.Random(5)
    for _ in range(40):
        snap, todo = _random_case(rng)
        ws = Workspace(snap)
        for view in todo:
            ws.start(view, {role: s.min for role, s in view.spec.roles.items()})
        for view in snap.jobs.values():
            if rng.random() < 0.4:
                ws.release(view)
        fit = ws._fit
        if fit is None:
            continue
        names = [n.name for n in snap.cluster.nodes]
        assert fit.keys == {n: _fit_key(ws.free[n].gpu, ws.free[n].cpu, names.index(n)) for n in names}
        assert fit.order == sorted(fit.keys.values())


# -- `_place`: straight to `start` where `try_place` would be it ---------------------------------------
@pytest.mark.parametrize("holds_tasks", [False, True])
def test_place_goes_to_start_where_try_place_would(monkeypatch: pytest.MonkeyPatch, holds_tasks: bool) -> None:
    """A quota-aware rule without queue definitions: a claimant running nowhere is started by `ws.start` (no
    `try_place` frame); one whose view holds tasks goes through `try_place` (it prefers where it runs)."""
    claimant = running("c", 2, on="n1") if holds_tasks else pending("c", 2)
    snap = snapshot(cluster(2, 4), running("r", 1, on="n0"), claimant)
    ws = Workspace(snap, empty=holds_tasks)
    rule = SameClassLowerRank(ws, [])
    assert rule.quota_aware and not ws.queued
    tries: list[Any] = []
    starts: list[Any] = []
    _spy(monkeypatch, preemption, "try_place", tries)
    _spy(monkeypatch, Workspace, "start", starts)
    assert preemption._place(rule, ws, snap.jobs["c"], {Role.WORKER: 2})
    assert len(tries) == int(holds_tasks)
    assert len(starts) == int(not holds_tasks)  # (a view holding tasks: `try_place` chooses where it runs)
    if holds_tasks:
        assert ws.allocations["c"].nodes == ("n1",)


# -- the busy decision ----------------------------------------------------------------------------
def _plan(snap: Snapshot, name: str) -> Plan:
    policy = make_policy(name)
    policy.decide(snap)
    return policy.decide(snap)


@pytest.mark.parametrize("name", ["trainmaster", "tiresias"])
def test_busy_decision_plans_alike_with_and_without_lean_start(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """A busy decision (1,500 pending): `lean_start` on and off plan alike; on, most starts skip `find`."""
    snap: Snapshot = bench_snapshot(busy=True, pending=1500)
    finds: list[Any] = []
    _spy(monkeypatch, Workspace, "find", finds)
    lean = _plan(snap, name)
    lean_finds = len(finds)
    monkeypatch.setattr(Workspace, "lean_start", False)
    finds.clear()
    reference = _plan(snap, name)
    assert lean.allocations == reference.allocations and dict(lean.waits) == dict(reference.waits)
    assert dict(lean.reasons) == dict(reference.reasons) and lean.wake_after == reference.wake_after
    if name == "trainmaster":
        assert lean_finds < len(finds) // 2
