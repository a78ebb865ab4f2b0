"""The goodput law with a noise scale that grows with the batch (`NOISE_GROWTH`, 0.3 since session 21; issue 11)."""

from __future__ import annotations

import math

import pytest
from tests.replay_helpers import observe_one_node_runs

from trainmaster.core.job import BatchRange, simple_job
from trainmaster.models import goodput
from trainmaster.models.book import ModelBook
from trainmaster.models.goodput import gain, grown_gain
from trainmaster.models.speed import Config, Form, SpeedFit

# smallest 20, submitted at 640 (deepspeech2-like: the greedy runs it at 40 early on)
BOUNDS = BatchRange(min=20, max=640, base=640)
SPEED = SpeedFit(Form.ALLREDUCE, (0.05, 0.001, 0.0, 0.0, 0.0, 0.0))
SQR = 1.0


def peer_gain(batch: float, phi: float, smallest: float) -> float:
    """The peer's per-step progress `(var + sqr) / (var / s + sqr)`, `s = batch / smallest`, var from `phi`."""
    var = phi * SQR / smallest
    return (var + SQR) / (var / (batch / smallest) + SQR)


def test_grown_gain_is_the_peer_ratio_when_the_noise_scale_follows_the_power_law() -> None:
    phi40, growth = 29.0, 0.5
    for batch in (20, 40, 80, 160, 320, 480, 640):
        truth = peer_gain(batch, phi40 * (batch / 40) ** growth, 20) / peer_gain(640, phi40 * 16**growth, 20)
        assert grown_gain(batch, 640, phi40, 40, 20, growth) == pytest.approx(truth, rel=1e-12)
    # growth 0 is the one-phi law; the grown law rates a small batch far lower (0.25 against 0.61 at batch 40)
    assert grown_gain(40, 640, phi40, 40, 20, 0.0) == pytest.approx(gain(40, 640, phi40), rel=1e-12)
    assert grown_gain(40, 640, phi40, 40, 20, growth) == pytest.approx(0.2467, abs=1e-4)
    assert gain(40, 640, phi40) == pytest.approx(0.6060, abs=1e-4)
    assert grown_gain(640, 640, phi40, 40, 20, growth) == 1.0
    assert grown_gain(40, 640, math.inf, 40, 20, growth) == 40 / 640


def test_a_job_reported_at_a_small_batch_gets_the_grown_gain_per_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = simple_job("a", 1, max_gpus=4, adaptive_batch=BOUNDS)
    book = ModelBook()
    # var rescaled to the base, as jobs report it: phi = base * var / sqr = 30 samples at the batch run
    observe_one_node_runs(book, spec, SPEED, ((1, 40), (2, 40), (4, 40), (4, 80)), SQR, 30.0 / 640)
    law = book.model("a", spec).goodput
    assert law is not None and law.phi == pytest.approx(30.0) and law.at == 80.0  # measured last at 80
    c = Config(4, 0, 1, 80.0)
    monkeypatch.setattr(goodput, "NOISE_GROWTH", 0.0)
    off = {b: law.gain(b) for b in (40, 80, 320, 640)}
    assert off == {b: gain(b, 640, 30.0) for b in off}  # off: the branch's law
    monkeypatch.setattr(goodput, "NOISE_GROWTH", 0.5)
    for b in (40, 80, 320, 640):
        truth = peer_gain(b, 30.0 * (b / 80) ** 0.5, 20) / peer_gain(640, 30.0 * 8**0.5, 20)
        assert law.gain(b) == pytest.approx(truth, rel=1e-12)
        assert law.goodput(c, b) == pytest.approx(SPEED.steps_per_s(c._replace(batch=float(b))) * truth, rel=1e-12)
    assert law.gain(40) < 0.6 * off[40]  # a small batch no longer claims most of its base rate


def test_the_default_law_grows_the_noise_scale() -> None:
    """The preset's default (0.3, kept by the session-21 keep rule): a small batch's gain is read with a noise scale
    grown to that batch, so it is below the one-`phi` law's; at the batch `phi` was measured at nothing changes."""
    assert goodput.NOISE_GROWTH == 0.3
    law = goodput.GoodputSpeed(SPEED, BOUNDS, 30.0, (), 80.0)
    assert law.gain(40) == pytest.approx(grown_gain(40, 640, 30.0, 80.0, 20, 0.3), rel=1e-12)
    assert law.gain(40) < gain(40, 640, 30.0)
    assert law.gain(640) == 1.0
