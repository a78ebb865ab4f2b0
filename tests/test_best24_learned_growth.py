"""The noise scale's growth with the batch learned per job type from its jobs' reports (`GROWTH_LEARNED`; issue 11)."""

from __future__ import annotations

import math

import pytest

from trainmaster.core.allocation import Allocation, Placement
from trainmaster.core.events import Report
from trainmaster.core.job import BatchRange, JobSpec, Role, Target, simple_job
from trainmaster.models import goodput
from trainmaster.models.book import ModelBook
from trainmaster.models.goodput import NoiseGrowth, grown_gain
from trainmaster.models.speed import Config, Form, SpeedFit

BOUNDS = BatchRange(min=20, max=640, base=640)
SPEED = SpeedFit(Form.ALLREDUCE, (0.05, 0.001, 0.0, 0.0, 0.0, 0.0))
TRUE_GROWTH = 0.7


def true_phi(progress: float, batch: float) -> float:
    """A type whose noise scale grows with training (x e^3 over it) and as `batch^0.7` with the batch."""
    return 5.0 * math.exp(3.0 * progress) * float(batch**TRUE_GROWTH)


def test_pairs_at_the_same_progress_give_the_exponent() -> None:
    g = NoiseGrowth(prior=0.3, weight=1.0)
    g.observe("a", 0.10, 20, true_phi(0.10, 20))
    g.observe("a", 0.20, 20, true_phi(0.20, 20))
    assert g.pairs == 0 and g.growth(0.15) == 0.3  # one job alone: the prior (its reports drift with progress)
    g.observe("b", 0.15, 20, true_phi(0.15, 20))  # the same batch: no slope
    assert g.pairs == 0
    g.observe("c", 0.15, 80, true_phi(0.15, 80))  # a's bracket, log phi interpolated to 0.15: one pair, dx = log 4
    assert g.pairs == 1
    assert g.growth(0.15) == pytest.approx((TRUE_GROWTH * 4 + 0.3) / 5, rel=1e-12)  # shrunk: 0.62
    for k in range(40):  # many pairs: the truth's exponent, whatever the drift with progress
        f = 0.25 + k * 0.015
        for job, batch in (("a", 20), ("c", 80), ("d", 320)):
            g.observe(job, f + 0.001 * len(job), batch, true_phi(f + 0.001 * len(job), batch))
    assert g.growth() == pytest.approx(TRUE_GROWTH, abs=0.01)
    assert g.pairs > 40


def test_brackets_too_wide_or_at_two_batches_are_skipped_and_the_exponent_is_clamped() -> None:
    g = NoiseGrowth(prior=0.3, weight=1.0)
    g.observe("a", 0.1, 20, 1.0)
    g.observe("a", 0.1 + goodput.GROWTH_SPAN * 1.5, 20, 1.0)
    g.observe("b", 0.15, 80, 5.0)
    assert g.pairs == 0  # a's reports are too far apart to say where it stood at 0.15
    g.observe("c", 0.5, 20, 1.0)
    g.observe("c", 0.52, 40, 1.0)  # a batch switch inside the bracket
    g.observe("d", 0.51, 160, 1.0)
    assert g.pairs == 0
    g.observe("e", 0.51, 160, 1.0, cohort=640)  # another cohort (base batch, target): its progress is other epochs
    g.observe("e", 0.53, 160, 1.0, cohort=640)
    g.observe("f", 0.52, 20, 1.0)
    assert g.pairs == 0
    steep = NoiseGrowth(prior=0.3, weight=1.0)
    for k in range(10):  # (a pair needs the other job's reports on both sides: b trails a)
        steep.observe("a", k * 0.05, 20, 1.0)
    for k in range(9):
        steep.observe("b", k * 0.05 + 0.01, 80, 16.0)  # exponent 2: clamped
    assert steep.growth() == goodput.GROWTH_RANGE[1]


def run(book: ModelBook, job: str, spec: JobSpec, steps: range, batch: int, workers: int) -> None:
    """`job` reports at `steps` (progress = step / 1,000) from `workers` GPUs on one node at `batch`."""
    alloc = Allocation.of(Placement(Role.WORKER, "n0") for _ in range(workers))
    for i, step in enumerate(steps):
        sqr = 1.0
        var = true_phi(step / 1000, batch) * sqr / BOUNDS.base  # reported rescaled to the base: phi = base var / sqr
        c = Config(workers, 0, 1, float(batch))
        book.observe(job, spec, Report(float(step), job, step, loss=1.0 / (i + 1), steps_per_s=SPEED.steps_per_s(c),
                                       allocation=alloc, batch=batch, grad_sqr=sqr, grad_var=var))


@pytest.mark.parametrize("learned", [True, False])
def test_the_switched_on_law_uses_the_types_exponent(monkeypatch: pytest.MonkeyPatch, learned: bool) -> None:
    monkeypatch.setattr(goodput, "GROWTH_LEARNED", learned)
    spec_a = simple_job("a", 1, max_gpus=4, adaptive_batch=BOUNDS, job_type="t", target=Target(steps=1000))
    spec_b = simple_job("b", 1, max_gpus=4, adaptive_batch=BOUNDS, job_type="t", target=Target(steps=1000))
    book = ModelBook()
    for w in (1, 2, 4):
        run(book, "a", spec_a, range(100 * w, 100 * w + 40, 10), 40 * w, w)
        run(book, "b", spec_b, range(100 * w + 5, 100 * w + 45, 10), 320, 4)
    law = book.model("a", spec_a).goodput
    assert law is not None and law.at == 160.0
    if not learned:
        assert law.growth is None and not book.noise_growth
        assert law.gain(40) == pytest.approx(grown_gain(40, 640, law.phi, 160.0, 20, goodput.NOISE_GROWTH), rel=1e-12)
        return
    grown = book.noise_growth["t"]
    assert grown.pairs >= 5
    assert law.growth == grown.growth() and law.growth == pytest.approx(TRUE_GROWTH, abs=0.05)
    for b in (40, 160, 640):
        assert law.gain(b) == pytest.approx(grown_gain(b, 640, law.phi, 160.0, 20, law.growth), rel=1e-12)
    assert law.gain(40) < grown_gain(40, 640, law.phi, 160.0, 20, goodput.NOISE_GROWTH)  # a steeper type
