"""Convergence: fit `loss(k) = 1/(b0*k + b1) + b2` (b >= 0) to reported losses; steps left to a target.

Optimus (Peng et al., EuroSys'18, section 3.1) models SGD's O(1/k) convergence
this way and weights later points more, since the curve's tail decides when the
job ends. The fit only ever sees what the job reported.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from trainmaster.core.job import Target

MIN_POINTS = 5  # fewer losses than this: no curve


@dataclass(frozen=True, slots=True)
class LossCurve:
    """A fitted `1/(b0*k + b1) + b2`."""

    b0: float
    b1: float
    b2: float

    def loss(self, step: float) -> float:
        denom = self.b0 * step + self.b1
        return math.inf if denom <= 0 else 1.0 / denom + self.b2

    def step_at_loss(self, target: float) -> float:
        """First step where the curve reaches `target` (inf when it never does)."""
        if target <= self.b2 or self.b0 <= 0:
            return math.inf
        return max(0.0, (1.0 / (target - self.b2) - self.b1) / self.b0)

    def step_at_plateau(self, threshold: float, window: int) -> float:
        """First step k where the loss improves by less than `threshold` (relative) over the next `window` steps."""
        if self.b0 <= 0:
            return 0.0

        def improvement(k: float) -> float:
            now = self.loss(k)
            return (now - self.loss(k + window)) / now if now > 0 else 0.0

        if improvement(0.0) < threshold:
            return 0.0
        lo, hi = 0.0, float(window)
        while improvement(hi) >= threshold:
            lo, hi = hi, hi * 2
            if hi > 1e15:
                return math.inf
        for _ in range(60):  # improvement falls monotonically in k: bisect
            mid = (lo + hi) / 2
            if improvement(mid) >= threshold:
                lo = mid
            else:
                hi = mid
        return hi


def _weights(steps: np.ndarray) -> np.ndarray:
    """Later points count more: weight grows linearly from 0.2 to 1 over the observed steps."""
    span = float(steps.max() - steps.min()) or 1.0
    out: np.ndarray = 0.2 + 0.8 * (steps - steps.min()) / span
    return out


def fit_loss_curve(steps: Sequence[float], losses: Sequence[float]) -> LossCurve | None:
    """Weighted bounded least squares (all b >= 0); None with too few or unusable points."""
    k = np.asarray(steps, dtype=float)
    y = np.asarray(losses, dtype=float)
    ok = np.isfinite(k) & np.isfinite(y) & (y > 0)
    k, y = k[ok], y[ok]
    if len(k) < MIN_POINTS or float(np.ptp(k)) <= 0:
        return None
    w = np.sqrt(_weights(k))
    scale = float(max(k.max(), 1.0))  # fit in scaled steps so the parameters are of similar size
    ks = k / scale
    # Start: the best b2 on a grid, each with a linear fit of 1/(y - b2) = b0*k + b1.
    best: tuple[float, np.ndarray] | None = None
    for b2 in np.linspace(0.0, 0.98 * float(y.min()), 25):
        inv = 1.0 / (y - b2)
        a = np.vstack([ks, np.ones_like(ks)]).T * w[:, None]
        coef, *_ = np.linalg.lstsq(a, inv * w, rcond=None)
        coef = np.maximum(coef, 1e-9)
        err = float(np.sum((w * (1.0 / (coef[0] * ks + coef[1]) + b2 - y)) ** 2))
        if best is None or err < best[0]:
            best = (err, np.array([coef[0], coef[1], b2]))
    assert best is not None
    x0 = np.maximum(best[1], 1e-9)

    def residuals(x: np.ndarray) -> np.ndarray:
        return np.asarray(w * (1.0 / (x[0] * ks + x[1] + 1e-12) + x[2] - y))

    from scipy.optimize import least_squares  # imported here: scipy.optimize costs ~0.6 s at CLI start-up

    sol = least_squares(residuals, x0, bounds=(0.0, np.inf), method="trf", max_nfev=200)
    b0, b1, b2 = (float(v) for v in sol.x)
    return LossCurve(b0=b0 / scale, b1=b1, b2=b2)


@dataclass(frozen=True, slots=True)
class Progress:
    """What a job has reported so far, enough to say how far it still has to go."""

    step: float
    epoch: float | None = None
    curve: LossCurve | None = None


def remaining_steps(target: Target, progress: Progress) -> float | None:
    """Steps left to the job's target; None when it cannot be told yet (no target, or no curve yet).

    steps: exact. epochs: from the steps-per-epoch rate reported so far. loss
    and plateau: from the fitted curve; a running job is never predicted done or
    never done (noise can put the fit's asymptote on either side of the target), so
    "never" becomes as many steps again as done so far and "already" a tenth of them.
    """
    step = progress.step
    candidates: list[float] = []
    if target.steps is not None:
        candidates.append(max(0.0, target.steps - step))
    if target.epochs is not None and progress.epoch is not None and progress.epoch > 0 and step > 0:
        per_epoch = step / progress.epoch
        candidates.append(max(0.0, (target.epochs - progress.epoch) * per_epoch))
    if progress.curve is not None:
        ends = []
        if target.loss is not None:
            ends.append(progress.curve.step_at_loss(target.loss))
        if target.plateau is not None:
            ends.append(progress.curve.step_at_plateau(target.plateau, target.window))
        for end in ends:
            left = end - step
            if not math.isfinite(left):  # the fit never gets there: guess as many steps again as done
                left = max(step, 1.0)
            elif left <= 0:  # the fit says done, the job says not yet (noisy losses): a little more
                left = max(0.1 * step, 1.0)
            candidates.append(left)
    return min(candidates) if candidates else None
