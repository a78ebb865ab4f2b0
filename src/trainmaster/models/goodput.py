"""Goodput (Pollux, OSDI'21): throughput times statistical efficiency, for jobs that adapt their batch size.

A larger global batch `M` runs more samples per second but each sample helps
less. With the gradient noise scale `phi` (samples; `phi = M0 * var / sqr`
from the gradient's squared norm `sqr` and its variance `var` at the batch `M0`
the learning rate was tuned for), one step at batch `M` makes as much progress
as `gain(M) = M (phi + M0) / (M0 (phi + M))` steps at `M0` (McCandlish et al.
2018; Pollux section 3.1), and a sample is worth `efficiency(M) = (phi + M0) / (phi + M)`
of one at `M0`. Goodput = steps/s at `M` (the fitted speed model, whose
all-reduce form has the local batch `M/K` as a feature) x `gain(M)`: steps at
`M0` per second. Remaining work of an adaptive job is counted in those steps.
Unlike Pollux, the noise scale is not taken as one number for every batch: the
measured statistics grow with the batch they are measured at, so `phi` read at
the batch a job reports at is grown to each candidate batch (`grown_gain`,
`NOISE_GROWTH`) before the gain is read.

`NoiseScale` smooths the `grad_sqr`/`grad_var` jobs report (an exponential
moving average of each in log space, since single estimates are noisy);
`GoodputSpeed` is a `SpeedPredictor` in `M0`-steps per second at the best
batch for each configuration; it picks batches (`JobModel.best_batch`), while
sizing keeps the plain speed model (`policies/goodput.py` says why).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from trainmaster.core.job import BatchRange
from trainmaster.models.speed import Config, SpeedPredictor

SMOOTHING = 0.5  # weight of the newest report in the (log-space) moving averages
CANDIDATES = 24  # batch sizes tried per configuration, geometric between the bounds
STRETCH = 2.0  # a fitted speed law is trusted this factor beyond the local batches it was measured at
# Noise-scale growth with the batch it is measured at (`phi(M) = phi(b) (M / b)^NOISE_GROWTH`, b: the batch the
# job reported at; `grown_gain`); 0: one `phi` for every batch (`gain`, Pollux's law). Why 0.3: the measured
# validation statistics (`validation-*.csv`' `grad_sqr`/`grad_var` per batch) give a noise scale that rises with the
# batch early in training (deepspeech2 epoch 2: 14 -> 165 from batch 20 to 640; cifar10 epoch 3: 189 -> 821 from
# 128 to 2,048), so one `phi` read at a small batch overrates what a small batch earns (best21: deepspeech2's
# goodput +44..+53%, cifar10's +22..+26% where they ran). 0.3 won best22's screens (w1-4: -1.8% at load 1, -3.9%
# at 0.5; 0.2 and 0.5 smaller, 0.7 lost) and the keep rule (session 21: every Pollux load, elastic-free,
# Philly-derived).
NOISE_GROWTH = 0.3


def gain(batch: float, base: float, noise: float) -> float:
    """Progress of one step at `batch`, in steps at `base` (1 at `base`; `noise` = inf: linear in the batch)."""
    if math.isinf(noise):
        return batch / base
    return batch * (noise + base) / (base * (noise + batch))


def grown_gain(batch: float, base: float, noise: float, at: float, smallest: float, growth: float) -> float:
    """`gain` with a noise scale that grows with the batch it is measured at (the peer's truth: `grad_sqr` and
    `grad_var` differ per validated batch): `noise` measured at `at`, read at `M` as `noise (M / at)^growth`;
    progress per step `g(M) = M (phi_M + m) / (m (phi_M + M))` against the smallest batch `m`, as a ratio to
    `g(base)`. `growth` 0 is `gain`."""
    if math.isinf(noise):
        return batch / base

    def g(m: float) -> float:
        phi = noise * float((m / at) ** growth)
        return m * (phi + smallest) / (phi + m)

    return g(batch) / g(base)


def efficiency(batch: float, base: float, noise: float) -> float:
    """Progress per sample at `batch` relative to one at `base`, in (0, 1] for `batch >= base`."""
    return gain(batch, base, noise) * base / batch


def noise_scale(sqr: float, var: float, base: float) -> float:
    """`phi = base * var / sqr` in samples; inf when the gradient's norm is not positive (all noise)."""
    if not (sqr > 0 and math.isfinite(sqr)) or not math.isfinite(var):
        return math.inf
    return base * max(var, 0.0) / sqr


class NoiseScale:
    """Moving averages of a job's reported `grad_sqr` and `grad_var` (at its base batch).

    Geometric (in log space): both move by orders of magnitude over training
    (`grad_sqr` falls as the loss does), and an arithmetic average would keep
    the early, large values for dozens of reports, holding the noise scale far
    below the truth and batches too small. Reports are already moving averages
    of the job's own estimates (`train/goodput.py`), so this smooths lightly.
    """

    def __init__(self, base: float, smoothing: float = SMOOTHING) -> None:
        self.base = base
        self.at = base  # the batch of the last report that carried a batch (what `phi` was measured at)
        self.smoothing = smoothing
        self._log_sqr: float | None = None
        self._log_var: float | None = None
        self.count = 0

    def observe(self, sqr: float | None, var: float | None, batch: float | None = None) -> bool:
        """Fold one report in (measured at `batch`, None: unchanged); False (ignored) unless both are finite and
        var >= 0, sqr > 0."""
        if sqr is None or var is None or not (math.isfinite(sqr) and math.isfinite(var)) or sqr <= 0 or var < 0:
            return False
        a = self.smoothing if self.count else 1.0
        ls, lv = math.log(sqr), math.log(max(var, sqr * 1e-12))  # var 0 (no noise): phi ~ 0
        self._log_sqr = ls if self._log_sqr is None else self._log_sqr + a * (ls - self._log_sqr)
        self._log_var = lv if self._log_var is None else self._log_var + a * (lv - self._log_var)
        self.count += 1
        if batch:
            self.at = float(batch)
        return True

    @property
    def sqr(self) -> float | None:
        return None if self._log_sqr is None else math.exp(self._log_sqr)

    @property
    def var(self) -> float | None:
        return None if self._log_var is None else math.exp(self._log_var)

    @property
    def phi(self) -> float | None:
        """The noise scale in samples, or None before any report."""
        sqr, var = self.sqr, self.var
        if sqr is None or var is None:
            return None
        return noise_scale(sqr, var, self.base)


def batch_candidates(bounds: BatchRange, workers: int, local: tuple[float, float] | None = None) -> list[int]:
    """Global batches to try on `workers` replicas: whole multiples of `workers` within the bounds.

    `local`: the smallest and largest local batch the speed law was measured at;
    candidates stay within `STRETCH` of them (a trust region: a law fitted on a
    few points extrapolates badly, and each run at a new batch widens it).
    """
    w = max(workers, 1)
    lo = max(-(-bounds.min // w), 1)  # local batch
    hi = bounds.max // w
    if local is not None and hi >= lo:
        lo, hi = min(max(lo, math.ceil(local[0] / STRETCH)), hi), max(min(hi, math.floor(local[1] * STRETCH)), lo)
    if hi < lo:
        return [lo * w]  # the range is narrower than one sample per worker: the smallest even split
    if hi == lo:
        return [lo * w]
    ratio = (hi / lo) ** (1.0 / (CANDIDATES - 1))
    sizes = {lo, hi, *(round(lo * ratio**i) for i in range(CANDIDATES))}
    return sorted(m * w for m in sizes if lo <= m <= hi)


@dataclass(frozen=True)
class GoodputSpeed(SpeedPredictor):
    """Steps at the base batch per second, at the best batch for the configuration (module doc)."""

    speed: SpeedPredictor  # steps/s at any (workers, nodes, batch)
    bounds: BatchRange
    phi: float
    # (multi-node, smallest, largest local batch) the speed was measured at, per regime (`trusted`)
    local: tuple[tuple[bool, float, float], ...] = ()
    at: float = 0.0  # the batch `phi` was measured at (`NoiseScale.at`); 0: the base
    _best: dict[Config, tuple[int, float]] = field(default_factory=dict, compare=False, repr=False)

    def goodput(self, c: Config, batch: float) -> float:
        return self.speed.steps_per_s(c._replace(batch=float(batch))) * self.gain(batch)

    def gain(self, batch: float) -> float:
        """Progress of one step at `batch` in steps at the base (`grown_gain` when `NOISE_GROWTH` is on)."""
        if NOISE_GROWTH:
            return grown_gain(batch, self.bounds.base, self.phi, self.at or self.bounds.base, self.bounds.min,
                              NOISE_GROWTH)
        return gain(batch, self.bounds.base, self.phi)

    def best(self, c: Config) -> tuple[int, float]:
        """(global batch, goodput) that maximizes goodput on `c`; ties to the smaller batch."""
        found = self._best.get(c)
        if found is not None:
            return found
        best = (self.bounds.base, -1.0)
        for batch in batch_candidates(self.bounds, c.workers, self.trusted(c)):
            value = self.goodput(c, batch)
            if value > best[1] * (1 + 1e-9):
                best = (batch, value)
        found = self._best[c] = (best[0], max(best[1], 0.0))
        return found

    def trusted(self, c: Config) -> tuple[float, float] | None:
        """Local batches measured in `c`'s regime (one node or several: the sync differs), else in any."""
        same = [(lo, hi) for multi, lo, hi in self.local if multi == (c.nodes > 1)]
        pool = same or [(lo, hi) for _, lo, hi in self.local]
        return (min(lo for lo, _ in pool), max(hi for _, hi in pool)) if pool else None

    def steps_per_s(self, c: Config) -> float:
        return self.best(c)[1]
