"""The optimus policy: capacity, minimums, zero-gain stop, restart penalty, and a full simulated run."""

from __future__ import annotations

import dataclasses
import random
from types import MappingProxyType

import pytest

from builders import cluster, pending, running, snapshot
from trainmaster.controller.loop import Controller
from trainmaster.core.cluster import parse_shorthand
from trainmaster.core.job import BatchRange, Role
from trainmaster.core.resources import Resources
from trainmaster.core.states import JobState
from trainmaster.engines.sim.engine import SimConfig, SimEngine
from trainmaster.models.book import JobModel
from trainmaster.models.goodput import GoodputSpeed
from trainmaster.models.speed import Config, Form, LinearScaling, SpeedFit
from trainmaster.policies.optimus import Optimus
from trainmaster.policies.registry import make_policy
from trainmaster.policies.snapshot import JobView, Plan, Snapshot
from trainmaster.workloads.base import Workload
from trainmaster.workloads.ps_truth import MODELS, ps_job, ps_workload


def _model(jid: str, remaining: float, *, cap: int = 64, speed: float = 1.0) -> JobModel:
    """Linear scaling up to `cap` workers, flat after: gains stop at `cap`."""
    return JobModel(jid, Form.ALLREDUCE, 1.0, LinearScaling(Config(1), speed, cap), "test", 0.0, remaining, 1)


def _with_models(snap: Snapshot, models: dict[str, JobModel]) -> Snapshot:
    return dataclasses.replace(snap, models=MappingProxyType(models))


def _check_capacity(snap: Snapshot, plan: Plan) -> None:
    used: dict[str, Resources] = {}
    for jid, alloc in plan.allocations.items():
        for node, res in alloc.per_node(snap.jobs[jid].spec).items():
            used[node] = used.get(node, Resources()) + res
    for node, res in used.items():
        assert res.fits_in(snap.cluster.node(node).capacity), f"{node} overfilled: {res}"


@pytest.mark.parametrize("seed", range(12))
def test_greedy_never_exceeds_capacity_and_gives_every_admitted_job_its_minimum(seed: int) -> None:
    rng = random.Random(seed)
    cl = cluster(rng.randint(2, 6), 4)
    views: list[JobView] = []
    models: dict[str, JobModel] = {}
    for i in range(rng.randint(1, 10)):
        want = rng.choice((1, 2, 4))
        views.append(pending(f"j{i}", want, submit=float(i), min_gpus=1, max_gpus=2 * want))
        if rng.random() < 0.8:  # some jobs have no model yet
            models[f"j{i}"] = _model(f"j{i}", rng.uniform(10, 1e5), cap=rng.randint(1, 8))
    snap = _with_models(snapshot(cl, *views), models)
    plan = Optimus().decide(snap)
    _check_capacity(snap, plan)
    for view in views:
        alloc = plan.allocations.get(view.id)
        assert alloc is not None, "every minimum (1 GPU) fits: nobody waits"
        assert 1 <= alloc.count(Role.WORKER) <= view.spec.roles[Role.WORKER].max
        if view.id not in models:
            assert alloc.count(Role.WORKER) == 1  # no model: the minimum only


def test_minimums_go_in_arrival_order_when_not_all_fit() -> None:
    cl = cluster(1, 4)
    views = [pending(f"j{i}", 2, submit=float(i)) for i in range(3)]  # fixed 2-GPU gangs: two fit
    plan = Optimus().decide(snapshot(cl, *views))
    assert set(plan.allocations) == {"j0", "j1"}
    assert "does not fit" in plan.reasons["j2"]


def test_greedy_stops_at_zero_gain_and_prefers_the_larger_gain() -> None:
    cl = cluster(4, 4)  # 16 GPUs
    a = pending("a", 1, max_gpus=16)
    b = pending("b", 1, submit=1.0, max_gpus=16)
    snap = _with_models(snapshot(cl, a, b), {"a": _model("a", 1000.0, cap=2), "b": _model("b", 1000.0, cap=3)})
    plan = Optimus().decide(snap)
    assert plan.allocations["a"].count(Role.WORKER) == 2  # no gain past 2: stops with GPUs free
    assert plan.allocations["b"].count(Role.WORKER) == 3
    # both scale, one GPU left: it goes where the gain per GPU is largest
    cl2 = cluster(1, 3)
    short, long = pending("s", 1, max_gpus=4), pending("l", 1, submit=1.0, max_gpus=4)
    models = {"s": _model("s", 100.0), "l": _model("l", 10000.0)}
    rate = Optimus().decide(_with_models(snapshot(cl2, short, long), models))
    time = Optimus(objective="time").decide(_with_models(snapshot(cl2, short, long), models))
    assert rate.allocations["s"].count(Role.WORKER) == 2  # completion rate: the short job
    assert time.allocations["l"].count(Role.WORKER) == 2  # seconds saved (the paper): the long job


def test_restart_penalty_keeps_a_running_job_unless_the_gain_pays_for_it() -> None:
    cl = cluster(1, 4)
    view = running("r", 1, on="n0", min_gpus=1, max_gpus=2)
    small = _with_models(snapshot(cl, view), {"r": _model("r", 100.0)})  # 2 GPUs save 50 s < 60 s penalty
    assert Optimus().decide(small).allocations["r"] == view.allocation
    big = _with_models(snapshot(cl, view), {"r": _model("r", 10000.0)})
    assert Optimus().decide(big).allocations["r"].count(Role.WORKER) == 2


def test_ps_jobs_get_servers_and_workers_spread_evenly() -> None:
    spec, truth = ps_job("p", MODELS["vgg-16"], batch=256, sync=True, steps=1000)
    theta = (3 * 15.47e9 / 3.5e12, 0.46, 0.44, 0.002, 0.005)
    model = JobModel("p", Form.PS_SYNC, 256.0, SpeedFit(Form.PS_SYNC, theta), "test", 0.0, 1e4, 5)
    view = JobView(id="p", spec=spec, state=JobState.PENDING, submit_time=0.0)
    snap = _with_models(snapshot(parse_shorthand("2x4"), view), {"p": model})
    alloc = Optimus().decide(snap).allocations["p"]
    w, p = alloc.count(Role.WORKER), alloc.count(Role.PS)
    assert p >= 2 and w >= 2  # VGG-16's 553 MB of parameters need several servers
    for role in (Role.WORKER, Role.PS):
        per_node = [alloc.counts.get((role, n), 0) for n in alloc.nodes]
        assert max(per_node) - min(per_node) <= 1
    assert truth.speed(w, p) > truth.speed(1, 1) * 2


def test_simulated_run_learns_from_reports_and_finishes_every_job() -> None:
    workload: Workload = ps_workload(12, rate_per_hour=30, seed=3)
    engine = SimEngine(parse_shorthand("3x4"), workload, SimConfig(report_interval=300, speed_noise=0.02,
                                                                   loss_noise=0.01, seed=1))
    controller = Controller(engine, make_policy("optimus"), check=True)  # check: capacity after every change
    seen: list[JobModel] = []
    controller.listeners.append(lambda what, rec: seen.append(controller.models[rec.id])
                                if what == "report" and rec.id in controller.models else None)
    controller.run()
    summary = controller.summary()
    assert summary.finished == 12
    assert not controller.models  # finished jobs are dropped
    own = [m for m in seen if m.basis == "own fit"]
    assert own and all(m.speed is not None for m in own)
    assert any(m.basis == "type prior" for m in seen)  # a later job of a seen model starts from its siblings
    assert any(m.curve is not None and m.remaining is not None for m in seen)  # loss target: curve-based


def test_same_snapshot_gives_the_same_plan() -> None:
    cl = cluster(2, 4)
    views = [pending(f"j{i}", 2, submit=float(i), min_gpus=1, max_gpus=4) for i in range(3)]
    models = {v.id: _model(v.id, 1000.0 * (i + 1)) for i, v in enumerate(views)}
    snap = _with_models(snapshot(cl, *views), models)
    first = Optimus().decide(snap)
    assert first.allocations == Optimus().decide(snap).allocations
    assert sum(a.count(Role.WORKER) for a in first.allocations.values()) == 8  # all scale: every GPU used


def test_a_job_whose_model_cannot_predict_speed_yet_gets_its_minimum() -> None:
    cl = cluster(1, 4)
    view = pending("n", 1, max_gpus=4)
    blind = JobModel("n", Form.ALLREDUCE, 1.0, None, "none", 0.0, 500.0, 0)  # steps known, speed not
    plan = Optimus().decide(_with_models(snapshot(cl, view), {"n": blind}))
    assert plan.allocations["n"].count(Role.WORKER) == 1


class _CrossNode:
    """Steps/s linear in the workers, 40% slower once they span nodes: not concave at the node boundary."""

    def steps_per_s(self, c: Config) -> float:
        return float(c.workers) * (1.0 if c.nodes <= 1 else 0.6)


def _goodput_model(jid: str, measured: int) -> JobModel:
    """An adaptive job whose goodput (phi 0: every batch learns alike) is `_CrossNode`, measured up to `measured`."""
    speed = _CrossNode()
    goodput = GoodputSpeed(speed, BatchRange(min=1, max=64, base=1), 0.0)
    return JobModel(jid, Form.ALLREDUCE, 1.0, speed, "own fit", 0.0, 1e5, 3, goodput=goodput,
                    max_workers=measured)


@pytest.mark.parametrize(("measured", "want"), [(1, 2), (2, 4), (4, 8), (8, 16), (16, 16)])
def test_goodput_sizing_crosses_the_node_boundary_at_pollux_pace(measured: int, want: int) -> None:
    """One worker past a full node loses speed, a whole node more gains: the jump takes it; growth is
    capped at twice the most workers measured (Pollux's exploration pace); plain Optimus stops at one node."""
    cl = cluster(4, 4)
    view = pending("g", 1, min_gpus=1, max_gpus=16)
    snap = _with_models(snapshot(cl, view), {"g": _goodput_model("g", measured)})
    plan = Optimus(goodput=True).decide(snap)
    assert plan.allocations["g"].count(Role.WORKER) == want
    _check_capacity(snap, plan)
    plain = Optimus().decide(snap)
    assert plain.allocations["g"].count(Role.WORKER) == min(4, 16)


@pytest.mark.parametrize("seed", range(8))
def test_goodput_sizing_never_exceeds_capacity(seed: int) -> None:
    rng = random.Random(seed)
    cl = cluster(rng.randint(1, 5), 4)
    views = [pending(f"j{i}", 1, submit=float(i), min_gpus=1, max_gpus=rng.choice((4, 8, 16)))
             for i in range(rng.randint(1, 8))]
    models = {v.id: dataclasses.replace(_goodput_model(v.id, rng.choice((1, 4, 16))), remaining=rng.uniform(10, 1e5))
              for v in views}
    snap = _with_models(snapshot(cl, *views), models)
    plan = Optimus(goodput=True).decide(snap)
    _check_capacity(snap, plan)
    assert all(plan.allocations[v.id].count(Role.WORKER) >= 1 for v in views[:len(cl.nodes) * 4])
