"""Convergence model: the fit recovers known curves; remaining steps per target kind."""

from __future__ import annotations

import math

import numpy as np
import pytest

from trainmaster.core.job import Target
from trainmaster.models.convergence import LossCurve, Progress, fit_loss_curve, remaining_steps


@pytest.mark.parametrize(("b0", "b1", "b2"), [(2e-3, 0.5, 0.3), (5e-5, 0.2, 1.1), (1e-2, 2.0, 0.05)])
def test_fit_recovers_known_coefficients_from_noisy_losses(b0: float, b1: float, b2: float) -> None:
    rng = np.random.default_rng(7)
    truth = LossCurve(b0, b1, b2)
    steps = np.linspace(0, 20 / b0 * b1, 120)  # out to where the curve has mostly flattened
    losses = np.array([truth.loss(k) for k in steps]) * (1 + rng.normal(0, 0.01, len(steps)))
    fitted = fit_loss_curve(steps, losses)
    assert fitted is not None
    assert fitted.b0 >= 0 and fitted.b1 >= 0 and fitted.b2 >= 0
    assert fitted.b2 == pytest.approx(b2, rel=0.15, abs=0.01)
    # what matters downstream: the step at which a target loss is reached
    target = b2 + 0.5 * (truth.loss(steps[-1]) - b2) + 0.02
    assert fitted.step_at_loss(target) == pytest.approx(truth.step_at_loss(target), rel=0.15)


def test_too_few_points_or_no_spread_gives_no_curve() -> None:
    assert fit_loss_curve([1, 2, 3], [3.0, 2.0, 1.5]) is None
    assert fit_loss_curve([5] * 10, [1.0] * 10) is None


def test_curve_inverse_and_plateau() -> None:
    c = LossCurve(1e-3, 0.5, 0.2)
    k = c.step_at_loss(0.3)
    assert c.loss(k) == pytest.approx(0.3)
    assert c.step_at_loss(0.2) == math.inf  # the asymptote is never reached
    p = c.step_at_plateau(0.01, 100)
    before = (c.loss(p - 1) - c.loss(p - 1 + 100)) / c.loss(p - 1)
    after = (c.loss(p + 1) - c.loss(p + 1 + 100)) / c.loss(p + 1)
    assert before >= 0.01 > after


def test_remaining_steps_for_each_target_kind() -> None:
    curve = LossCurve(1e-3, 0.5, 0.2)
    assert remaining_steps(Target(steps=1000), Progress(step=250)) == 750
    assert remaining_steps(Target(steps=1000), Progress(step=1200)) == 0
    # 10 epochs, 4 done in 400 steps: 600 to go
    assert remaining_steps(Target(epochs=10), Progress(step=400, epoch=4.0)) == pytest.approx(600)
    assert remaining_steps(Target(loss=0.3), Progress(step=100, curve=curve)) == pytest.approx(
        curve.step_at_loss(0.3) - 100)
    assert remaining_steps(Target(loss=0.3), Progress(step=100)) is None  # no curve yet
    assert remaining_steps(Target(), Progress(step=100, curve=curve)) is None  # no target
    # several targets: whichever comes first
    both = remaining_steps(Target(steps=500, loss=0.3), Progress(step=100, curve=curve))
    assert both == pytest.approx(min(400, curve.step_at_loss(0.3) - 100))


def test_a_running_job_is_never_predicted_done_or_never_done() -> None:
    curve = LossCurve(1e-3, 0.5, 0.25)
    # target below the fitted asymptote: "never" becomes as many steps again as done so far
    assert remaining_steps(Target(loss=0.2), Progress(step=800, curve=curve)) == 800
    # the fit says the target is behind us while the job still runs: a tenth more
    assert remaining_steps(Target(loss=0.9), Progress(step=5000, curve=curve)) == pytest.approx(500)
