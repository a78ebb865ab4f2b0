"""Session 16 (tir16): a placement step without intermediate objects plans exactly as its reference.

`resources_of` (and the arithmetic built on it) makes the same `Resources` as `__init__`; `Allocation.on_one_node`
says what `len(nodes) == 1` says; `Workspace.lean_take` (`_take_lean`: integer sums, one object per node and one
total) leaves the same free capacity, total, growth count and fit index as `_take`, and a new total object exactly
where `_take` makes one (its identity means "nothing moved since"); `demand` of one task is that task's own
resources; `try_place` for a job holding nothing adds no zero. Contended replays (preemption, multi-node gangs,
parameter servers, hard quotas) plan alike with the switch on and off.
"""

from __future__ import annotations

import pickle
import random
from dataclasses import FrozenInstanceError, replace
from typing import Any

import pytest
from bench.decision_time import snapshot as busy_snapshot
from bench.record_plans import QUEUES, queued
from tests.builders import cluster, linear_workload, pending, running, snapshot, with_ps
from tests.replay_helpers import Before, on_and_off, preset_plans, same_plans

from trainmaster.core.allocation import EMPTY, Allocation, Placement
from trainmaster.core.job import Role
from trainmaster.core.resources import Resources, resources_of
from trainmaster.models.book import _shape_of
from trainmaster.policies import queues as queues_module
from trainmaster.policies.cycle import Cycle
from trainmaster.policies.goodput import _workers_nodes
from trainmaster.policies.queuebook import QueueBook
from trainmaster.policies.registry import make_policy
from trainmaster.policies.snapshot import Plan
from trainmaster.policies.workspace import Workspace, _FitIndex, demand
from trainmaster.workloads.gavel import GavelTruth
from trainmaster.workloads.loaders import load_workload

WORKLOAD = load_workload("synthetic:300:60", max_factor=1.0, seed=3, oracle=True)  # a long line, preemption


# -- resources_of and the arithmetic ----------------------------------------------------------
def test_resources_of_is_init() -> None:
    rng = random.Random(16)
    for _ in range(300):
        cpu, memory, gpu = (rng.randint(-(2**62), 2**62) for _ in range(3))
        fast, ref = resources_of(cpu, memory, gpu), Resources(cpu, memory, gpu)
        assert type(fast) is Resources
        assert (fast.cpu, fast.memory, fast.gpu) == (ref.cpu, ref.memory, ref.gpu)
        assert fast == ref and hash(fast) == hash(ref) and not fast < ref and not ref < fast
        assert str(fast) == str(ref) and repr(fast) == repr(ref)
        assert pickle.loads(pickle.dumps(fast)) == ref
    with pytest.raises(FrozenInstanceError):
        resources_of(1, 2, 3).cpu = 4  # type: ignore[misc]


def test_arithmetic_as_by_init() -> None:
    """`+`, `-`, `*` (both sides) give what `Resources(...)` of the integer results gives, as new objects."""
    rng = random.Random(61)
    for _ in range(300):
        a = Resources(rng.randint(0, 10**6), rng.randint(0, 2**50), rng.randint(0, 64))
        b = Resources(rng.randint(0, 10**6), rng.randint(0, 2**50), rng.randint(0, 64))
        n = rng.randint(-3, 9)
        for got, want in ((a + b, (a.cpu + b.cpu, a.memory + b.memory, a.gpu + b.gpu)),
                          (a - b, (a.cpu - b.cpu, a.memory - b.memory, a.gpu - b.gpu)),
                          (a * n, (a.cpu * n, a.memory * n, a.gpu * n)),
                          (n * a, (a.cpu * n, a.memory * n, a.gpu * n))):
            assert type(got) is Resources and got == Resources(*want) and hash(got) == hash(Resources(*want))
            assert got is not a and got is not b
    assert (Resources(1, 2, 3) - Resources(1, 2, 3)).is_zero()


# -- on_one_node --------------------------------------------------------------------------------
def test_on_one_node() -> None:
    assert not EMPTY.on_one_node and not Allocation().on_one_node
    assert Allocation.of([Placement(Role.WORKER, "n0")]).on_one_node
    assert Allocation.of([Placement(Role.WORKER, "n3")] * 4).on_one_node
    assert Allocation.of([Placement(Role.PS, "n1"), Placement(Role.WORKER, "n1"), Placement(Role.WORKER, "n1")]
                         ).on_one_node  # (sorted by role: the node is not the sort's first key)
    assert not Allocation.of([Placement(Role.WORKER, "n0"), Placement(Role.WORKER, "n1")]).on_one_node
    # first and last task on one node, another in between elsewhere
    assert not Allocation.of([Placement(Role.PS, "n0"), Placement(Role.PS, "n1"), Placement(Role.WORKER, "n0")]
                             ).on_one_node
    rng = random.Random(1)
    for _ in range(500):
        tasks = [Placement(rng.choice(list(Role)), f"n{rng.randint(0, 2)}") for _ in range(rng.randint(0, 5))]
        alloc = Allocation.of(tasks)
        assert alloc.on_one_node == (len(alloc.nodes) == 1)


def test_on_one_node_readers_read_as_before() -> None:
    """The shapes the models read (`_shape_of`, `_workers_nodes`) and Gavel's consolidated throughput, with
    `on_one_node` in front, against the set-of-nodes formulas they replace."""
    spec = with_ps(pending("a", 2).spec)
    truth = GavelTruth("resnet", 2, 1000.0, {"v100": {("resnet", 2): 4.0, ("resnet", 3): 5.0},
                                             "v100_unconsolidated": {("resnet", 2): 3.0, ("resnet", 3): 4.5}})
    rng = random.Random(7)
    seen = set()
    for _ in range(400):
        tasks = [Placement(rng.choice(list(Role)), f"n{rng.randint(0, 2)}") for _ in range(rng.randint(1, 4))]
        alloc = Allocation.of(tasks)
        workers, ps = alloc.count(Role.WORKER), alloc.count(Role.PS)
        worker_nodes = len({t.node for t in alloc.tasks if t.role is Role.WORKER})
        nodes = worker_nodes if ps == 0 else len(alloc.nodes)
        assert _shape_of(alloc) == (workers, ps, max(nodes, 1))
        assert _workers_nodes(alloc) == (workers, worker_nodes or 1)
        if alloc.gpus(spec) in (2, 3):
            consolidated = len(alloc.nodes) <= 1
            assert truth.steps_per_second(alloc, spec) == truth.throughput("v100", alloc.gpus(spec), consolidated)
            seen.add(consolidated)
    assert seen == {True, False}


# -- demand -------------------------------------------------------------------------------------
def test_demand_of_one_task_is_its_resources() -> None:
    spec = with_ps(pending("a", 2).spec, count=2)
    worker, ps = spec.roles[Role.WORKER].resources, spec.roles[Role.PS].resources
    assert demand(spec, {Role.WORKER: 1}) is worker
    assert demand(spec, {Role.PS: 1}) is ps
    assert demand(spec, {Role.WORKER: 3}) == worker * 3
    assert demand(spec, {Role.WORKER: 0}) == Resources()
    assert demand(spec, {Role.WORKER: 2, Role.PS: 1}) == worker * 2 + ps
    assert demand(spec, {Role.WORKER: 1, Role.PS: 1}) == worker + ps
    assert demand(spec, {}) == Resources()


# -- the lean take, directly --------------------------------------------------------------------
def _state(ws: Workspace) -> tuple[Any, ...]:
    fit = ws._fit
    return (dict(ws.free), ws.total_free, ws._grown, dict(ws.allocations),
            None if fit is None else (list(fit.order), dict(fit.keys)))


def _steps(ws: Workspace, snap: Any, fit: bool) -> list[tuple[Any, ...]]:
    """Assign, move and release one-node, multi-node, two-role and empty allocations; the state after each step
    and whether the total was replaced."""
    if fit:
        ws._fit = _FitIndex(ws.free, (n.name for n in snap.cluster.nodes))
    jobs = snap.jobs
    out = []
    steps: list[tuple[str, Allocation | None]] = [
        ("p", Allocation.of([Placement(Role.WORKER, "n1")] * 2)),
        ("q", Allocation.of([Placement(Role.WORKER, "n2"), Placement(Role.WORKER, "n3")])),
        ("s", Allocation.of([Placement(Role.PS, "n3"), Placement(Role.WORKER, "n2"), Placement(Role.WORKER, "n3")])),
        ("p", Allocation.of([Placement(Role.WORKER, "n2"), Placement(Role.WORKER, "n3")])),  # moved
        ("r", None),  # a running job released (two nodes)
        ("e", EMPTY),  # nothing taken
        ("q", None),
        ("o", None),  # one node
    ]
    for jid, alloc in steps:
        before = ws.total_free
        if alloc is None:
            ws.release(jobs[jid])
        else:
            ws.assign(jobs[jid], alloc)
        out.append((*_state(ws), ws.total_free is before))
    return out


@pytest.mark.parametrize("fit", [False, True], ids=["no-index", "fit-index"])
def test_lean_take_leaves_what_take_leaves(fit: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    cl = cluster(4, 4)
    snap = snapshot(cl, running("r", 4, on=["n0", "n0", "n1", "n2"]), running("o", 1, on="n3"),
                    pending("p", 2), pending("q", 2), pending("e", 1),
                    pending("s", spec=with_ps(pending("s", 2).spec)))
    runs = {}
    for lean in (True, False):
        monkeypatch.setattr(Workspace, "lean_take", lean)
        runs[lean] = _steps(Workspace(snap), snap, fit)
    assert runs[True] == runs[False]
    same = [step[-1] for step in runs[True]]
    assert same == [False, False, False, False, False, True, False, False]  # only the empty take keeps it


# -- try_place without a zero -------------------------------------------------------------------
def test_try_place_adds_no_zero_for_a_job_holding_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """A job holding nothing: no `Resources` built for what it holds (`__init__` not called), the same placement;
    a job holding tasks still counts them as free (it fits only with them)."""
    cl = cluster(2, 4)
    snap = snapshot(cl, running("h", 3, on="n0"), running("x", 4, on="n1"), pending("p", 1), pending("big", 2))
    made: list[tuple[int, int, int]] = []
    init = Resources.__init__

    def counted(self: Resources, cpu: int = 0, memory: int = 0, gpu: int = 0) -> None:
        made.append((cpu, memory, gpu))
        init(self, cpu, memory, gpu)

    ws = Workspace(snap)
    ws.memo.pool(snap.jobs["p"].spec)  # (the cluster's eligible nodes and their total: built once, up front)
    monkeypatch.setattr(Resources, "__init__", counted)
    placed = queues_module.try_place(ws, snap.jobs["p"], {Role.WORKER: 1})
    assert placed == Allocation.of([Placement(Role.WORKER, "n0")]) and not made
    assert queues_module.try_place(ws, snap.jobs["big"], {Role.WORKER: 2}) is None  # (nothing left for two)
    monkeypatch.undo()
    ws = Workspace(snap)  # h grows 3 -> 4 on n0: fits only with its own 3 counted as free
    grown = queues_module.try_place(ws, snap.jobs["h"], {Role.WORKER: 4})
    assert grown == Allocation.of([Placement(Role.WORKER, "n0")] * 4)


def test_try_place_under_hard_quotas_gets_need_as_is(monkeypatch: pytest.MonkeyPatch) -> None:
    """With queue definitions, the quota check is handed the whole need for a job holding nothing, and the need
    less what it holds for one that holds tasks."""
    cl = cluster(2, 4)
    snap = snapshot(cl, running("h", 2, on="n0"), pending("p", 3))
    snap = replace(snap, queues=QUEUES)
    seen: list[Resources] = []
    ws = Workspace(snap)
    real = type(ws.book).hard_quota_blocks

    def spied(book: Any, job: Any, need: Resources) -> bool:
        seen.append(need)
        return bool(real(book, job, need))

    monkeypatch.setattr(type(ws.book), "hard_quota_blocks", spied)
    p, h = snap.jobs["p"], snap.jobs["h"]
    queues_module.try_place(ws, p, {Role.WORKER: 3})
    queues_module.try_place(ws, h, {Role.WORKER: 3})
    task = p.spec.roles[Role.WORKER].resources
    assert seen == [task * 3, task]


# -- replays: on and off ------------------------------------------------------------------------
_SPIES = {"lean": (Workspace, "_take_lean", Before(lambda ws, spec, alloc, sign: len(alloc.per_node(spec)))),
          "ref": (Workspace, "_take")}


@pytest.mark.parametrize("preset", ["tiresias", "srtf", "trainmaster"])
def test_contended_replay_plans_alike(preset: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """synthetic:150:60 on 4x4 (8-GPU gangs span nodes): same plans; the lean path took every take, on one node
    and on several."""
    fast, slow = on_and_off(monkeypatch, lambda: preset_plans(preset, WORKLOAD), (Workspace, "lean_take"),
                            spies=_SPIES, least=100)
    assert not fast.calls["ref"] and not slow.calls["lean"] and len(fast.calls["lean"]) > 400
    assert 1 in fast.calls["lean"] and max(fast.calls["lean"]) > 1  # one-node and multi-node takes
    assert len(slow.calls["ref"]) == len(fast.calls["lean"])


def test_queued_ps_replay_plans_alike(monkeypatch: pytest.MonkeyPatch) -> None:
    """trainmaster under three quota queues (`try_place` with quotas), parameter-server gangs among the jobs:
    same plans."""
    rows = [(f"j{i}", 20.0 * i, (1, 2, 4, 8)[i % 4], 300.0 + 70 * (i % 7)) for i in range(60)]
    workload = queued(linear_workload(rows, oracle=True, ps=[f"j{i}" for i in range(0, 60, 3)]))
    spies = {**_SPIES, "quota": (QueueBook, "hard_quota_blocks")}
    fast, _ = on_and_off(monkeypatch, lambda: preset_plans("trainmaster", workload, queues=QUEUES),
                         (Workspace, "lean_take"), spies=spies, least=30)
    assert max(fast.calls["lean"]) > 1 and len(fast.calls["quota"]) > 30
    assert any(a.count(Role.PS) for plan in fast.plans for a in plan.allocations.values())


def test_busy_decision_plans_alike(monkeypatch: pytest.MonkeyPatch) -> None:
    """The decision bench's busy snapshot (3,000 pending on 1,000 full nodes), decided twice by each preset."""
    snap = busy_snapshot(busy=True, pending=3000)
    for preset in ("tiresias", "trainmaster", "srtf"):
        plans: dict[bool, list[Plan]] = {}
        for lean in (True, False):
            monkeypatch.setattr(Workspace, "lean_take", lean)
            cycle = make_policy(preset)
            assert isinstance(cycle, Cycle)
            plans[lean] = [cycle.decide(snap), cycle.decide(snap)]
        same_plans(plans[True], plans[False], least=1)
        assert any(snap.jobs[jid].active is False for jid in plans[True][1].allocations)  # starts happened
