"""The trainmaster preset's fast paths for Philly-like jobs (one type, no step targets: no model knows the
steps left) plan exactly as their reference paths, on a Philly prefix replayed with and without each."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from tests.replay_helpers import Recorder, same_plans
from tests.test_model_groups import _philly

from trainmaster.cli.simulate_cmd import LEARNING_REPORT_INTERVAL
from trainmaster.controller.loop import Controller
from trainmaster.core.allocation import Allocation, Placement
from trainmaster.core.cluster import parse_shorthand
from trainmaster.core.job import Role, simple_job
from trainmaster.core.states import JobState
from trainmaster.engines.sim.engine import SimConfig, SimEngine
from trainmaster.models import priors
from trainmaster.models import speed as speed_module
from trainmaster.models.book import JobModel
from trainmaster.models.priors import TypePriors
from trainmaster.models.speed import Config, Form, Row, SpeedFit, deferred_fit
from trainmaster.policies import backfill
from trainmaster.policies.backfill import Kept, Reservation, predicted_finishes
from trainmaster.policies.registry import make_policy
from trainmaster.policies.snapshot import JobView, Plan
from trainmaster.policies.trainmaster import AdaptiveCycle


def trainmaster_philly_plans(shared_data: Path) -> list[Plan]:
    """Every plan of the trainmaster preset on Philly's first jobs (`_philly`) on 4x8, reports every 300 s."""
    cycle = make_policy("trainmaster")
    assert isinstance(cycle, AdaptiveCycle)
    recorder = Recorder(cycle)
    engine = SimEngine(parse_shorthand("4x8"), _philly(shared_data),
                       SimConfig(report_interval=LEARNING_REPORT_INTERVAL, seed=2))
    Controller(engine, recorder).run()  # type: ignore[arg-type]
    return recorder.plans


def replay(patch: pytest.MonkeyPatch, shared_data: Path) -> tuple[list[Plan], dict[str, int]]:
    """Every plan of the trainmaster preset on Philly's first jobs (`_philly`) on 4x8; calls counted."""
    calls = {"predicted_remaining": 0, "steps_per_s": 0, "fit": 0}
    predicted, speed = backfill.predicted_remaining, JobModel.steps_per_s

    def counted_predicted(*args: object, **kwargs: object) -> float | None:
        calls["predicted_remaining"] += 1
        return predicted(*args, **kwargs)  # type: ignore[arg-type]

    def counted_speed(self: JobModel, workers: int, ps: int = 0, nodes: int = 1) -> float | None:
        calls["steps_per_s"] += 1
        return speed(self, workers, ps, nodes)

    solve = priors.fit

    def counted_fit(*args: object, **kwargs: object) -> SpeedFit | None:
        calls["fit"] += 1
        return solve(*args, **kwargs)  # type: ignore[arg-type]

    patch.setattr(backfill, "predicted_remaining", counted_predicted)
    patch.setattr(JobModel, "steps_per_s", counted_speed)
    patch.setattr(priors, "fit", counted_fit)  # (the eager refit)
    patch.setattr(speed_module, "fit", counted_fit)  # (a deferred one, when solved)
    return trainmaster_philly_plans(shared_data), calls


def test_unknown_predictions_read_in_line_plan_as_asking(monkeypatch: pytest.MonkeyPatch, shared_data: Path) -> None:
    """`Reservation.unknown_in_line` (a kept unknown answer of a job without an estimate read in line) and
    `JobModel.remaining_first` (no speed asked where the steps left are unknown): the same plans as the
    references, with fewer `predicted_remaining` calls and fewer speeds asked."""
    runs = {}
    for fast in (True, False):
        with monkeypatch.context() as patch:
            patch.setattr(Reservation, "unknown_in_line", fast)
            patch.setattr(JobModel, "remaining_first", fast)
            runs[fast] = replay(patch, shared_data)
    (fast_plans, fast_calls), (slow_plans, slow_calls) = runs[True], runs[False]
    same_plans(fast_plans, slow_plans, least=20)
    assert 0 < 2 * fast_calls["predicted_remaining"] < slow_calls["predicted_remaining"]
    assert fast_calls["steps_per_s"] < slow_calls["steps_per_s"]


def test_a_kept_unknown_answer_still_falls_back_on_the_estimate() -> None:
    """An unknown kept answer is read in line only for a job without an estimate: with one, the estimate
    answers (as `predicted_remaining` does), and a new model is asked again."""

    class Model:
        def __init__(self, left: float | None) -> None:
            self.left = left

        def remaining_time(self, workers: int, ps: int = 0, nodes: int = 1) -> float | None:
            return self.left

    alloc = Allocation.of([Placement(Role.WORKER, "n0")])
    views = {jid: JobView(id=jid, spec=simple_job(jid, 1, estimate=estimate), state=JobState.RUNNING,
                          submit_time=0.0, allocation=alloc) for jid, estimate in (("a", None), ("b", 500.0))}
    snap = SimpleNamespace(jobs=views, models={"a": Model(None), "b": Model(None)}, now=10.0)
    ws = SimpleNamespace(allocations={"a": alloc, "b": alloc})
    kept: Kept = {}
    for _ in range(2):  # asked, then read from `kept`
        assert predicted_finishes(snap, ws, kept) == {"a": None, "b": 510.0}  # type: ignore[arg-type]
        assert kept["a"][2] is None is kept["b"][2]
    snap.models = {"a": Model(30.0), "b": Model(None)}
    assert predicted_finishes(snap, ws, kept) == {"a": 40.0, "b": 510.0}  # type: ignore[arg-type]


def test_deferred_prior_fits_plan_as_solving_at_once(monkeypatch: pytest.MonkeyPatch, shared_data: Path) -> None:
    """`TypePriors.defer_fits`: a type's prior refit solved on first read; the same plans as solving each at
    once, with fewer solves (most reports' models are replaced unread)."""
    runs = {}
    for defer in (True, False):
        with monkeypatch.context() as patch:
            patch.setattr(TypePriors, "defer_fits", defer)
            runs[defer] = replay(patch, shared_data)
    (fast_plans, fast_calls), (slow_plans, slow_calls) = runs[True], runs[False]
    same_plans(fast_plans, slow_plans, least=20)
    assert 0 < fast_calls["fit"] < slow_calls["fit"]


def test_a_deferred_fit_reads_as_the_fit() -> None:
    """`deferred_fit`: the same coefficients, configurations, equality and hash as `fit` on the same rows, solved
    once on the first read of `theta` (its inputs then dropped); without rows, None as `fit`."""
    rows = [Row(Config(workers=w, ps=0, nodes=n, batch=64.0), y, 1)
            for w, n, y in ((1, 1, 0.50), (2, 1, 0.27), (4, 1, 0.15), (8, 2, 0.11), (2, 1, 0.29), (3, 2, 0.21),
                            (16, 4, 0.09))]
    now = speed_module.fit(Form.ALLREDUCE, rows, cross_slope=False)  # (two jobs' rows of one configuration)
    later = deferred_fit(Form.ALLREDUCE, rows, cross_slope=False)
    assert now is not None and later is not None and "theta" not in vars(later)
    assert later.configs == now.configs == 6
    other = deferred_fit(Form.ALLREDUCE, rows)  # (the other slope: these rows tell them apart)
    assert other is not None and other.theta != now.theta
    assert later == now and hash(later) == hash(now) and later.theta == now.theta
    assert "_inputs" not in vars(later)
    probe = Config(workers=16, ps=0, nodes=4, batch=64.0)
    assert later.steps_per_s(probe) == now.steps_per_s(probe)
    assert deferred_fit(Form.ALLREDUCE, []) is None is speed_module.fit(Form.ALLREDUCE, [])
    try:
        later.missing  # type: ignore[attr-defined]  # noqa: B018
    except AttributeError:
        pass
    else:
        raise AssertionError("an unknown attribute must raise AttributeError")
