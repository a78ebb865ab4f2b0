"""Batch-size adaptation in the simulator (`--fidelity pollux`) and the scheduler hooks that drive it.

The truth side: a job run at a chosen batch progresses at the peer's per-epoch
statistical efficiency and reports what the train library measures. The
scheduler side: the noise scale, the trust region of batch choice, in-place
batch switches (`Plan.rebatch`), and the learned shortest-remaining-time order.
"""

from __future__ import annotations

from pathlib import Path
from types import MappingProxyType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainmaster.cli.simulate import config_for, sim_config, simulate_one
from trainmaster.controller.diff import diff
from trainmaster.core.actions import Action, ActionKind
from trainmaster.core.allocation import Allocation, Placement
from trainmaster.core.cluster import parse_shorthand
from trainmaster.core.events import JobFinished, JobRunning, Report
from trainmaster.core.job import BatchRange, Role, Target, simple_job
from trainmaster.core.states import JobState
from trainmaster.engines.sim.engine import SimConfig, SimEngine
from trainmaster.models.book import ModelBook
from trainmaster.models.goodput import STRETCH, NoiseScale, batch_candidates
from trainmaster.policies.las import RemainingOrder, predicted_remaining
from trainmaster.policies.snapshot import JobView, Plan, Snapshot
from trainmaster.workloads.base import Workload, WorkloadJob
from trainmaster.workloads.pollux import load_pollux, load_profile
from trainmaster.workloads.pollux_peer import PeerTruth


@pytest.fixture
def profiles(shared_data: Path) -> Path:
    return shared_data / "pollux" / "profiles"


def _alloc(*per_node: int) -> Allocation:
    return Allocation.of(Placement(Role.WORKER, f"n{i}") for i, n in enumerate(per_node) for _ in range(n))


# -- the truth: the peer's gain at the chosen batch ----------------------------------------------------------

def test_at_batch_is_the_peers_gain_per_epoch_and_reports_the_noise_at_the_base_batch(profiles: Path) -> None:
    truth = PeerTruth.of(load_profile(profiles / "cifar10"), 2048)
    model, alloc = truth.model, _alloc(4, 4)
    ends = model.cumulative_steps(2048.0)
    run = truth.at_batch(alloc, 4096, 0.0)
    batching = model.batching(8, 4096)
    assert run.batch == batching.batch == 4096
    assert run.steps_per_s == pytest.approx(1 / model.step_time([4, 4], batching))
    assert run.rate == pytest.approx(run.steps_per_s * model.gain(4096.0, 0) / model.gain(2048.0, 0))
    assert run.until == pytest.approx(ends[1])
    sqr, var = model.grad_stats(4096.0, 0)
    assert run.grad_sqr == sqr  # the noise scale is the same whichever batch the variance is scaled to
    assert 2048 * run.grad_var / run.grad_sqr == pytest.approx(model.init_batch * var / sqr)
    late = truth.at_batch(alloc, 4096, ends[60])  # exactly at an epoch's start: that epoch's gain
    assert late.until == pytest.approx(ends[61])
    assert late.rate == pytest.approx(run.steps_per_s * model.gain(4096.0, 60) / model.gain(2048.0, 60))
    # At the submitted batch, epoch by epoch adds up to the job's length at its usual speed.
    at_base = sum((ends[e + 1] - ends[e]) / truth.at_batch(alloc, 2048, ends[e]).rate for e in range(model.epochs))
    assert at_base == pytest.approx(truth.total_steps / truth.speed([4, 4]))


def _one_job(truth: PeerTruth) -> Workload:
    spec = simple_job("a", 8, min_gpus=1, max_gpus=8, target=Target(steps=round(truth.total_steps)),
                      adaptive_batch=BatchRange(128, 4096, 2048))
    return Workload("one", (WorkloadJob("a", 0.0, spec, truth),))


def _drain(engine: SimEngine) -> list[object]:
    seen: list[object] = []
    while True:
        events = engine.wait(None)
        if not events:
            return seen
        seen.extend(events)


def test_engine_trains_at_the_chosen_batch_epoch_by_epoch(profiles: Path) -> None:
    truth = PeerTruth.of(load_profile(profiles / "cifar10"), 2048)
    alloc, ends = _alloc(4, 4), truth.model.cumulative_steps(2048.0)
    wl = _one_job(truth)
    spec = wl.jobs[0].spec
    engine = SimEngine(parse_shorthand("2x4"), wl, SimConfig(restart_delay=30.0, start_delay=30.0))
    engine.wait(None)  # the arrival
    engine.apply([Action(ActionKind.START, "a", spec, alloc, "placed", batch=4096)])
    seen = _drain(engine)
    expected = 30.0 + sum((ends[e + 1] - ends[e]) / truth.at_batch(alloc, 4096, ends[e]).rate
                          for e in range(truth.model.epochs))
    finished = [e for e in seen if isinstance(e, JobFinished)]
    assert len(finished) == 1 and finished[0].time == pytest.approx(expected, rel=1e-9)
    reports = [e for e in seen if isinstance(e, Report)]
    assert len(reports) >= truth.model.epochs  # one at each epoch's end: the gradient statistics move on
    assert all(r.batch == 4096 and r.grad_sqr is not None and r.grad_var is not None for r in reports)
    assert len({r.grad_sqr for r in reports}) > truth.model.epochs // 2
    # Without a chosen batch: the job's usual speed, no batch or noise in its reports.
    plain = SimEngine(parse_shorthand("2x4"), _one_job(truth), SimConfig(start_delay=30.0))
    plain.wait(None)
    plain.apply([Action(ActionKind.START, "a", spec, alloc, "placed")])
    seen = _drain(plain)
    done = [e for e in seen if isinstance(e, JobFinished)]
    assert done[0].time == pytest.approx(30.0 + truth.total_steps / truth.speed([4, 4]), rel=1e-9)
    assert all(r.batch is None and r.grad_sqr is None for r in seen if isinstance(r, Report))


def test_a_batch_switch_in_place_costs_no_restart(profiles: Path) -> None:
    truth = PeerTruth.of(load_profile(profiles / "cifar10"), 2048)
    alloc = _alloc(4, 4)
    wl = _one_job(truth)
    spec = wl.jobs[0].spec
    engine = SimEngine(parse_shorthand("2x4"), wl, SimConfig(restart_delay=30.0, start_delay=30.0,
                                                             report_interval=100.0))
    engine.wait(None)
    engine.apply([Action(ActionKind.START, "a", spec, alloc, "placed", batch=2048)])
    while engine.clock.now() < 500.0:
        engine.wait(None)
    step_before = engine._jobs["a"].done
    now = engine.clock.now()
    engine.apply([Action(ActionKind.RESIZE, "a", spec, alloc, "batch -> 4096", batch=4096)])
    events = engine.wait(None)
    assert engine.clock.now() == now and any(isinstance(e, JobRunning) for e in events)  # no 30 s restart
    report = next(e for e in events if isinstance(e, Report))
    assert report.batch == 4096 and report.step == int(step_before)  # nothing lost, nothing redone
    # A resize to another allocation still restarts.
    engine.apply([Action(ActionKind.RESIZE, "a", spec, _alloc(4), "shrink", batch=1024)])
    assert engine.wait(None)[0].time == pytest.approx(now + 30.0)


# -- the scheduler's hooks -------------------------------------------------------------------------------------

@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(1e-6, 1e6), st.floats(0.0, 1e6)), min_size=1, max_size=30),
       st.floats(0.05, 1.0))
def test_the_noise_scale_stays_between_the_reported_ones(reports: list[tuple[float, float]], smoothing: float) -> None:
    """Geometric averages with one weight for both: log phi is a weighted mean of each report's log phi."""
    ns = NoiseScale(32.0, smoothing)
    for sqr, var in reports:
        assert ns.observe(sqr, var)
    phis = [32.0 * max(var, sqr * 1e-12) / sqr for sqr, var in reports]
    assert ns.phi is not None
    assert min(phis) * (1 - 1e-9) <= ns.phi <= max(phis) * (1 + 1e-9)
    assert ns.count == len(reports)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 512), st.integers(1, 4096), st.integers(1, 64),
       st.one_of(st.none(), st.tuples(st.floats(0.5, 5000.0), st.floats(1.0, 10.0))))
def test_batch_candidates_stay_in_bounds_and_near_what_was_measured(
        lo: int, span: int, workers: int, local: tuple[float, float] | None) -> None:
    bounds = BatchRange(lo, lo + span, lo)
    measured = None if local is None else (local[0], local[0] * local[1])
    got = batch_candidates(bounds, workers, measured)
    assert got and got == sorted(set(got)) and all(b % workers == 0 for b in got)
    free = batch_candidates(bounds, workers)
    if max(free) < bounds.min:  # narrower than one sample per worker: the one even split
        assert got == free
        return
    assert min(free) <= min(got) and max(got) <= max(free)  # within the job's bounds
    if measured is not None:
        near = [b for b in free if measured[0] / STRETCH <= b / workers <= measured[1] * STRETCH]
        if near:  # the trust region meets the bounds: nothing outside it
            assert all(measured[0] / STRETCH - 1 <= b / workers <= measured[1] * STRETCH for b in got)
        else:  # it does not: the bound nearest to it
            assert len(got) == 1 and got[0] in (min(free), max(free))


def _view(jid: str, spec_steps: int, gpus: int, priority: int = 0, active: bool = False) -> JobView:
    spec = simple_job(jid, gpus, target=Target(steps=spec_steps), priority=priority)
    alloc = _alloc(gpus) if active else Allocation.of(())
    return JobView(jid, spec, JobState.RUNNING if active else JobState.PENDING, 0.0, allocation=alloc)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(100, 10_000), st.integers(1, 4), st.integers(0, 1), st.booleans(),
                          st.one_of(st.none(), st.floats(0.1, 10.0))), min_size=1, max_size=12))
def test_remaining_order_is_shortest_predicted_first_within_a_class(
        jobs: list[tuple[int, int, int, bool, float | None]]) -> None:
    book, views = ModelBook(use_priors=False), {}
    for i, (steps, gpus, priority, active, speed) in enumerate(jobs):
        view = _view(f"j{i}", steps, gpus, priority, active)
        views[view.id] = view
        if speed is not None:  # a report at its size: remaining steps over a linear-scaling speed
            report = Report(0.0, view.id, steps // 2, steps_per_s=speed, allocation=_alloc(gpus))
            book.observe(view.id, view.spec, report)
    models = {jid: book.model(jid, v.spec) for jid, v in views.items()}
    snap = Snapshot(0.0, parse_shorthand("4x4"), MappingProxyType(views), {}, models=MappingProxyType(models))
    order = RemainingOrder()(snap)
    assert sorted(j.id for j in order) == sorted(views)
    classes = [-j.spec.priority for j in order]
    assert classes == sorted(classes)  # higher priority first, always
    for priority in (0, 1):
        same = [j for j in order if j.spec.priority == priority]
        left = [predicted_remaining(snap, j) for j in same]
        known = [t for t in left if t is not None]
        assert left == [None] * (len(left) - len(known)) + known  # never measured: first (LAS)
        assert known == sorted(known)
        for j, t in zip(same, left, strict=True):
            if t is not None:
                speed = jobs[int(j.id[1:])][4]
                assert speed is not None
                assert t == pytest.approx((j.spec.target.steps - j.spec.target.steps // 2) / speed)


def test_rebatch_becomes_a_resize_in_place_only_for_running_jobs_kept_where_they_are() -> None:
    spec = simple_job("a", 4, adaptive_batch=BatchRange(32, 1024, 32))
    held = _alloc(4)
    views = {
        "run": JobView("run", spec, JobState.RUNNING, 0.0, allocation=held),
        "moved": JobView("moved", spec, JobState.RUNNING, 0.0, allocation=held),
        "starting": JobView("starting", spec, JobState.STARTING, 0.0, allocation=held),
    }
    snap = Snapshot(0.0, parse_shorthand("4x4"), MappingProxyType(views), {},
                    held=MappingProxyType({jid: v.allocation for jid, v in views.items()}))
    plan = Plan(allocations={"run": held, "moved": _alloc(2), "starting": held},
                batch={"run": 256, "moved": 64, "starting": 256}, rebatch={"run": 256, "moved": 64, "starting": 256})
    actions = {a.job_id: a for a in diff(snap, plan)}
    assert actions["run"].kind is ActionKind.RESIZE and actions["run"].allocation == held
    assert actions["run"].batch == 256 and actions["run"].reason == "batch -> 256"
    assert actions["moved"].allocation == _alloc(2) and actions["moved"].batch == 64  # a real resize
    assert "starting" not in actions  # not running yet: it starts at its batch anyway


# -- the preset, end to end ----------------------------------------------------------------------------------

# an in-place batch switch at any gain, `REBATCH_GAIN` only back to the batch last left (session 24 best29): was 1989,
# 125; a grown multi-node job spread two workers a node (`trainmaster.SPREAD_TO`, session 23 best27): was 1970, 104; the
# noise scale grown with the batch (`goodput.NOISE_GROWTH` = 0.3, session 21): was 2018, 154 (the busy-cluster
# restart charge, `optimus.RESTART_SHARE`, 20th look; before it 1996, 161: 17th look's one-node per-sample and
# cross-node overlap terms; before them 2058, 162; 14th: 2112, 173)
GOLDEN_POLLUX = {"mean_jct": 1907, "switches": 294}


def test_golden_pollux_run_adapts_batches_in_place(shared_data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """trainmaster on Pollux workload 1 (load 1, elastic, 16x4, fidelity pollux): pinned; it switches batches."""
    wl = load_pollux(shared_data / "pollux" / "workloads" / "workload-1.csv", shared_data / "pollux" / "profiles",
                     max_factor=2.0, fidelity="pollux")
    assert all(j.spec.adaptive_batch is not None for j in wl.jobs)
    switches: list[Action] = []
    apply = SimEngine.apply

    def recording(self: SimEngine, actions: list[Action]) -> None:
        switches.extend(a for a in actions if a.reason.startswith("batch -> "))
        apply(self, actions)

    monkeypatch.setattr(SimEngine, "apply", recording)
    result = simulate_one(wl, parse_shorthand("16x4"), "trainmaster", config_for("trainmaster", sim_config("pollux")))
    assert result.summary.finished == len(wl.jobs)
    got = {"mean_jct": round(result.summary.mean_jct), "switches": len(switches)}
    assert got == GOLDEN_POLLUX
