"""Goodput: the statistical-efficiency model, the noise-scale estimates, batch choice, and the opt-in field."""

from __future__ import annotations

import math
from types import MappingProxyType

import pytest
import torch
from tests.replay_helpers import observe_one_node_runs

from trainmaster.core.allocation import Allocation, Placement
from trainmaster.core.cluster import parse_shorthand
from trainmaster.core.errors import SpecError
from trainmaster.core.events import Report
from trainmaster.core.job import BatchRange, Role, simple_job
from trainmaster.core.spec import job_from_mapping
from trainmaster.core.states import JobState
from trainmaster.models.book import ModelBook
from trainmaster.models.goodput import GoodputSpeed, NoiseScale, batch_candidates, efficiency, gain, noise_scale
from trainmaster.models.speed import Config, Form, SpeedFit
from trainmaster.policies.goodput import choose_batches
from trainmaster.policies.snapshot import JobView, Plan, Snapshot
from trainmaster.train.goodput import GradientNoise, batch_size, local_max, measured_backward, scaled_lr

BOUNDS = BatchRange(min=32, max=4096, base=32)
# all-reduce step time 0.05 s + 0.001 s per local sample, no sync (one node)
SPEED = SpeedFit(Form.ALLREDUCE, (0.05, 0.001, 0.0, 0.0, 0.0, 0.0))


def test_efficiency_is_pollux_formula() -> None:
    phi, m0 = 200.0, 32.0
    for m in (32.0, 64.0, 1024.0):
        assert efficiency(m, m0, phi) == pytest.approx((phi + m0) / (phi + m))
        assert gain(m, m0, phi) == pytest.approx(efficiency(m, m0, phi) * m / m0)
    assert gain(m0, m0, phi) == pytest.approx(1.0)
    assert gain(4096, m0, math.inf) == pytest.approx(128.0)  # all noise: a bigger batch is worth every sample
    assert noise_scale(2.0, 5.0, 32.0) == pytest.approx(80.0)
    assert noise_scale(0.0, 5.0, 32.0) == math.inf


def test_noise_scale_smooths_and_ignores_bad_reports() -> None:
    ns = NoiseScale(32.0, smoothing=0.5)
    assert ns.phi is None
    assert not ns.observe(None, 1.0) and not ns.observe(-1.0, 1.0) and not ns.observe(1.0, math.nan)
    assert ns.observe(2.0, 4.0) and ns.phi == pytest.approx(64.0)
    assert ns.observe(8.0, 4.0) and (ns.sqr, ns.var) == (pytest.approx(4.0), pytest.approx(4.0))  # geometric


def test_batch_candidates_are_even_splits_within_bounds() -> None:
    for workers in (1, 3, 8):
        got = batch_candidates(BOUNDS, workers)
        assert got == sorted(set(got)) and all(b % workers == 0 and 32 <= b <= 4096 for b in got)
        assert got[0] == -(-32 // workers) * workers
    assert batch_candidates(BatchRange(min=4, max=6, base=4), 8) == [8]  # narrower than one sample per worker


def test_best_batch_grows_with_the_noise_scale_and_with_workers() -> None:
    def best(phi: float, workers: int) -> int:
        return GoodputSpeed(SPEED, BOUNDS, phi).best(Config(workers, 0, 1, 32.0))[0]

    assert best(1.0, 1) == 32  # little noise: a bigger batch only wastes samples
    assert best(100.0, 1) < best(10_000.0, 1) <= 4096
    assert best(1000.0, 1) <= best(1000.0, 8)
    g = GoodputSpeed(SPEED, BOUNDS, 1000.0)
    c = Config(4, 0, 1, 32.0)
    _, value = g.best(c)
    assert value == pytest.approx(g.steps_per_s(c))
    assert all(g.goodput(c, b) <= value * (1 + 1e-9) for b in batch_candidates(BOUNDS, 4))
    assert value > g.goodput(c, 32)  # it beats the base batch


def test_the_model_book_turns_an_adaptive_job_own_fit_into_goodput() -> None:
    spec = simple_job("a", 1, max_gpus=4, adaptive_batch=BOUNDS)
    book = ModelBook()
    observe_one_node_runs(book, spec, SPEED, ((1, 32), (2, 64), (4, 128), (4, 256)), 1.0, 50.0)
    model = book.model("a", spec)
    assert model.goodput is not None and model.basis == "own fit"  # sizing keeps the plain speed law
    assert model.speed is not model.goodput
    assert model.best_batch(4) == model.goodput.best(Config(4, 0, 1, 32.0))[0]
    plain = book.model("b", simple_job("b", 1, max_gpus=4))
    assert plain.goodput is None and plain.best_batch(4) is None


def test_choose_batches_picks_the_best_for_each_adaptive_job_and_base_without_a_model() -> None:
    spec = simple_job("a", 1, max_gpus=4, adaptive_batch=BOUNDS)
    book = ModelBook()
    for i, w in enumerate((1, 2, 4)):
        alloc = Allocation.of(Placement(Role.WORKER, "n0") for _ in range(w))
        book.observe("a", spec, Report(float(i), "a", i + 1, steps_per_s=SPEED.steps_per_s(Config(w, 0, 1, 32.0)),
                                       allocation=alloc, batch=32, grad_sqr=1.0, grad_var=500.0))
    alloc = Allocation.of(Placement(Role.WORKER, "n0") for _ in range(4))
    jobs = {jid: JobView(jid, s, JobState.PENDING, 0.0) for jid, s in (
        ("a", spec), ("b", simple_job("b", 1, max_gpus=4, adaptive_batch=BOUNDS)), ("c", simple_job("c", 1)))}
    snap = Snapshot(0.0, parse_shorthand("1x8"), MappingProxyType(jobs), {}, models={"a": book.model("a", spec)})
    plan = Plan(allocations={"a": alloc, "b": alloc, "c": alloc})
    chosen = choose_batches(snap, plan)
    assert chosen == {"a": book.model("a", spec).best_batch(4), "b": 32}
    assert chosen["a"] > 32


@pytest.mark.parametrize(("batch", "field", "words"), [
    ({"min": 64, "max": 32}, "spec.adaptiveBatch.min", "larger than max"),
    ({"min": 0, "max": 32}, "spec.adaptiveBatch.min", "between 1 and"),
    ({"min": 32, "max": 64, "base": 128}, "spec.adaptiveBatch.base", "outside min..max"),
    ({"min": 32}, "spec.adaptiveBatch.max", "required"),
    ({"min": 32, "max": 64, "step": 2}, "spec.adaptiveBatch.step", "unknown field"),
])
def test_adaptive_batch_field_is_validated(batch: dict[str, int], field: str, words: str) -> None:
    doc = {"apiVersion": "trainmaster/v1", "kind": "TrainingJob", "metadata": {"name": "a"},
           "spec": {"roles": {"worker": {"min": 1, "max": 2}}, "adaptiveBatch": batch}}
    with pytest.raises(SpecError) as err:
        job_from_mapping(doc)
    assert field in str(err.value) and words in str(err.value)


def test_adaptive_batch_field_parses_with_base_defaulting_to_min() -> None:
    doc = {"apiVersion": "trainmaster/v1", "kind": "TrainingJob", "metadata": {"name": "a"},
           "spec": {"roles": {"worker": {"min": 1, "max": 2}}, "adaptiveBatch": {"min": 32, "max": 1024}}}
    assert job_from_mapping(doc).adaptive_batch == BatchRange(min=32, max=1024, base=32)
    doc["spec"] = {**doc["spec"], "architecture": "parameter-server",  # type: ignore[dict-item]
                   "roles": {"worker": {"min": 1}, "ps": {"min": 1}}}
    with pytest.raises(SpecError, match=r"spec\.adaptiveBatch: only all-reduce"):
        job_from_mapping(doc)


def test_train_side_batch_and_learning_rate(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TM_BATCH_SIZE", raising=False)
    assert batch_size(32) == 32
    monkeypatch.setenv("TM_BATCH_SIZE", "128")
    assert batch_size(32) == 128
    assert scaled_lr(0.1, 128, 32) == pytest.approx(0.2)  # square-root scaling
    monkeypatch.setenv("TM_BATCH_SIZE", "lots")
    with pytest.raises(ValueError, match="TM_BATCH_SIZE"):
        batch_size(32)
    monkeypatch.delenv("TM_LOCAL_MAX", raising=False)
    assert local_max() is None
    monkeypatch.setenv("TM_LOCAL_MAX", "16")
    assert local_max() == 16
    monkeypatch.setenv("TM_LOCAL_MAX", "0")
    with pytest.raises(ValueError, match=r"TM_LOCAL_MAX.*at least 1"):
        local_max()


def test_gradient_noise_recovers_the_true_gradient_and_variance() -> None:
    """Per-sample gradients g_i = G + noise with known |G|^2 and trace of the covariance."""
    gen = torch.Generator().manual_seed(0)
    dim, true_g, sigma = 50, torch.full((50,), 0.2), 1.0  # |G|^2 = 2.0, tr(S) = 50
    noise = GradientNoise(base=8, smoothing=0.02)
    param = torch.nn.Parameter(torch.zeros(dim))
    for _ in range(600):
        samples = true_g + sigma * torch.randn(64, dim, generator=gen)
        first = (param * samples[:32]).sum(dim=1).mean()  # d/dparam = mean of the samples
        second = (param * samples[32:]).sum(dim=1).mean()
        measured_backward([param], first, second, (32, 32), noise)
        assert param.grad is not None and torch.allclose(param.grad, samples.mean(dim=0), atol=1e-6)
    stats = noise.stats()
    assert stats["grad_sqr"] == pytest.approx(2.0, rel=0.25)
    assert stats["grad_var"] == pytest.approx(50.0 / 8, rel=0.25)  # variance at the base batch of 8


def test_the_goodput_law_does_not_extrapolate_a_two_point_cross_node_sync_slope() -> None:
    spec = simple_job("a", 1, max_gpus=16, adaptive_batch=BOUNDS)
    book = ModelBook()
    cross = {8: 1.0, 12: 1.5}  # s of sync across nodes: two sizes, rising (the truth at 16 need not be)
    for i, w in enumerate((1, 2, 4, 8, 12)):
        alloc = Allocation.of(Placement(Role.WORKER, f"n{k // 4}") for k in range(w))
        step = 0.05 + 0.001 * 128 / w + (cross[w] if w > 4 else 0.02 * (w > 1))
        book.observe("a", spec, Report(float(i), "a", 10 * (i + 1), loss=1.0, steps_per_s=1 / step, allocation=alloc,
                                       batch=128, grad_sqr=1.0, grad_var=50.0))
    model = book.model("a", spec)
    assert model.goodput is not None and model.basis == "own fit"
    at16 = Config(16, 0, 4, 128.0)
    plain, law = model.speed, model.goodput.speed
    compute = 0.05 + 0.001 * 8
    assert plain is not None and 1 / plain.steps_per_s(at16) > compute + 1.5  # the plain law's line climbs on
    assert compute + 1.0 < 1 / law.steps_per_s(at16) < compute + 1.5  # the goodput law's: within what was measured
