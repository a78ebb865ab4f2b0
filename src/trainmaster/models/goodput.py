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

import bisect
import itertools
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
# (a switch; off: `NOISE_GROWTH` for every job) The growth learned per job type from its jobs' reports
# (`NoiseGrowth`): the truth's differs per application (early epochs: deepspeech2 ~0.6, cifar10 ~0.4, imagenet
# ~0.15, yolov3 ~0). Off because it lost best24's w1-4 screen at load 1 (every variant: w1 +16..+70 s, w2
# +6..+106 s): the exponents it learns are nearer the truth's, but a lower one (imagenet, yolov3) deepens the law's
# pessimism about a long job's speedup from more GPUs, which 0.3 offsets (bench/results/trainmaster.md, session 22).
GROWTH_LEARNED = False
GROWTH_WEIGHT = 1.0  # the prior `NOISE_GROWTH`'s weight, in pairs one doubling of the batch apart
GROWTH_RANGE = (0.0, 1.0)  # a learned exponent is clamped to this
GROWTH_SPAN = 0.1  # a job's two reports bracket another's progress only this close (fraction of its target)
GROWTH_BINS = 1  # the exponent per progress bin (fraction of the target); 1: one per type
GROWTH_PEERS = 16  # a report is set against its cohort's latest jobs only (bounded work per report)


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


class NoiseGrowth:
    """One job type's noise-scale growth with the batch, learned from its jobs' reports.

    The noise scale depends on training progress as well as on the batch it is
    read at, so two reports only say how it grows with the batch at the same
    progress: each report (progress `f`, the fraction of the job's target; batch
    `b`; its raw `phi`) is set against every other job of its cohort (the same
    base batch and target, so the same `f` is the same epoch: progress is counted
    in base-batch steps, whose epochs differ per base) whose two reports at one
    batch bracket `f` (within `GROWTH_SPAN`, `log phi` interpolated to `f`; the
    cohort's `GROWTH_PEERS` latest jobs): a pair `(log b - log b', log phi - log phi')`.
    The exponent is the pairs' slope through the origin, shrunk towards
    `NOISE_GROWTH` (`GROWTH_WEIGHT` pairs a doubling apart) and clamped to
    `GROWTH_RANGE`; per progress bin when `GROWTH_BINS` > 1.
    """

    def __init__(self, prior: float = NOISE_GROWTH, weight: float = GROWTH_WEIGHT, bins: int = GROWTH_BINS) -> None:
        self.prior = prior
        self.weight = weight * math.log(2.0) ** 2
        self.bins = max(bins, 1)
        # cohort -> job -> its reports' progress, (log b, log phi)
        self._runs: dict[object, dict[str, tuple[list[float], list[tuple[float, float]]]]] = {}
        self._sums = [[0.0, 0.0] for _ in range(self.bins)]  # per bin: sum dx dy, sum dx^2
        self.pairs = 0

    def _bin(self, progress: float) -> list[float]:
        return self._sums[min(max(int(progress * self.bins), 0), self.bins - 1)]

    def observe(self, job_id: str, progress: float, batch: float, phi: float, cohort: object = None) -> None:
        """Fold one report in (`phi` read at `batch`, `progress` in [0, 1]); ignored unless all are finite > 0."""
        if not (batch > 0 and 0 < phi < math.inf and math.isfinite(progress)):
            return
        x, y = math.log(batch), math.log(phi)
        sums = self._bin(progress)
        runs = self._runs.setdefault(cohort, {})
        for other, (fs, pts) in itertools.islice(reversed(runs.items()), GROWTH_PEERS):
            if other == job_id:
                continue
            i = bisect.bisect_left(fs, progress)
            if i == 0 or i == len(fs) or fs[i] - fs[i - 1] > GROWTH_SPAN or pts[i][0] != pts[i - 1][0]:
                continue
            dx = x - pts[i][0]
            if abs(dx) < 0.05:  # the same batch: no slope
                continue
            w = (progress - fs[i - 1]) / (fs[i] - fs[i - 1])
            dy = y - (pts[i - 1][1] + w * (pts[i][1] - pts[i - 1][1]))
            sums[0] += dx * dy
            sums[1] += dx * dx
            self.pairs += 1
        fs, pts = runs.setdefault(job_id, ([], []))
        if not fs or progress > fs[-1]:
            fs.append(progress)
            pts.append((x, y))

    def growth(self, progress: float = 0.0) -> float:
        """The exponent at `progress` (shrunk towards the prior, clamped)."""
        sxy, sxx = self._bin(progress)
        slope = (sxy + self.weight * self.prior) / (sxx + self.weight)
        return min(max(slope, GROWTH_RANGE[0]), GROWTH_RANGE[1])


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
    growth: float | None = None  # the noise scale's growth exponent (`NoiseGrowth`); None: `NOISE_GROWTH`
    _best: dict[Config, tuple[int, float]] = field(default_factory=dict, compare=False, repr=False)

    def goodput(self, c: Config, batch: float) -> float:
        return self.speed.steps_per_s(c._replace(batch=float(batch))) * self.gain(batch)

    def gain(self, batch: float) -> float:
        """Progress of one step at `batch` in steps at the base (`grown_gain` when `NOISE_GROWTH` is on)."""
        growth = NOISE_GROWTH if self.growth is None else self.growth
        if growth:
            return grown_gain(batch, self.bounds.base, self.phi, self.at or self.bounds.base, self.bounds.min,
                              growth)
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
