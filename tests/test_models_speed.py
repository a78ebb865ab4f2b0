"""Speed models: NNLS recovers known coefficients from noisy synthetic data; priors and fallbacks."""

from __future__ import annotations

import random

import pytest

from trainmaster.core.allocation import Allocation, Placement
from trainmaster.core.events import Report
from trainmaster.core.job import Role, simple_job
from trainmaster.models.book import ModelBook
from trainmaster.models.speed import (
    Config,
    Form,
    LinearScaling,
    Row,
    SpeedFit,
    fit,
    mape,
    packing_weights,
    time_like,
)
from trainmaster.workloads.ps_truth import MODELS, ps_job


def _rows(form: Form, truth: SpeedFit, configs: list[Config], noise: float, seed: int = 0) -> list[Row]:
    rng = random.Random(seed)
    out = []
    for c in configs:
        f = truth.steps_per_s(c) * (1 + rng.gauss(0, noise))
        out.append(Row(c, time_like(form, c, f)))
    return out


@pytest.mark.parametrize(("form", "theta"), [
    (Form.PS_SYNC, (3.5e-3, 0.18, 0.16, 0.002, 0.005)),
    (Form.PS_ASYNC, (0.6, 0.16, 0.002, 0.005)),
    (Form.ALLREDUCE, (0.01, 2e-3, 0.02, 0.004, 0.08, 0.01)),
])
def test_nnls_recovers_known_coefficients(form: Form, theta: tuple[float, ...]) -> None:
    truth = SpeedFit(form, theta)
    grid = [Config(w, p if form is not Form.ALLREDUCE else 0, nodes=-(-w // 4), batch=256)
            for w in range(1, 13) for p in (range(1, 7) if form is not Form.ALLREDUCE else (0,))]
    fitted = fit(form, _rows(form, truth, grid, noise=0.01))
    assert fitted is not None
    truths = [(c, truth.steps_per_s(c)) for c in grid]
    assert mape(fitted, truths) < 2.0
    biggest = max(range(len(theta)), key=lambda i: theta[i] * max(_feature_max(form, grid, i), 1e-9))
    assert fitted.theta[biggest] == pytest.approx(theta[biggest], rel=0.1)
    assert all(t >= 0 for t in fitted.theta)


def _feature_max(form: Form, grid: list[Config], i: int) -> float:
    from trainmaster.models.speed import features
    return max(features(form, c)[i] for c in grid)


def _alloc(workers: int, ps: int = 0) -> Allocation:
    return Allocation.of([Placement(Role.WORKER, f"n{i // 4}") for i in range(workers)]
                         + [Placement(Role.PS, f"n{i}") for i in range(ps)])


def test_five_observed_configurations_predict_unseen_ones_within_ten_percent() -> None:
    spec, truth = ps_job("r", MODELS["resnet-50"], batch=256, sync=True, steps=1000)
    book = ModelBook(use_priors=False)
    rng = random.Random(3)
    for w, p in [(1, 1), (2, 1), (4, 2), (3, 3), (6, 2)]:
        for _ in range(3):
            f = truth.speed(w, p) * (1 + rng.gauss(0, 0.03))
            book.observe("r", spec, Report(0.0, "r", 10, steps_per_s=f, allocation=_alloc(w, p)))
    model = book.model("r", spec)
    assert model.basis == "own fit" and model.configs == 5
    unseen = [(w, p) for w in range(1, 9) for p in range(1, 9)]
    errors = [abs((model.steps_per_s(w, p, 1) or 0) - truth.speed(w, p)) / truth.speed(w, p) for w, p in unseen]
    assert sum(errors) / len(errors) < 0.10


def test_linear_scaling_prior_is_capped_at_twice_the_largest_allocation_seen() -> None:
    spec = simple_job("a", 2, min_gpus=1, max_gpus=16)
    book = ModelBook()
    book.observe("a", spec, Report(0.0, "a", 0, steps_per_s=3.0, allocation=_alloc(2)))
    model = book.model("a", spec)
    assert model.basis == "linear scaling" and isinstance(model.speed, LinearScaling)
    assert model.steps_per_s(1) == pytest.approx(1.5)
    assert model.steps_per_s(4) == pytest.approx(6.0)
    assert model.steps_per_s(16) == pytest.approx(6.0)  # capped at 2 x 2 workers


def test_new_job_of_a_known_type_starts_from_its_siblings() -> None:
    book = ModelBook()
    rng = random.Random(1)
    for j in range(3):  # three finished siblings, each seen on several sizes
        spec, truth = ps_job(f"s{j}", MODELS["vgg-16"], batch=128 * (j + 1), sync=True, steps=1000)
        for w, p in [(1, 1), (2, 1), (2, 2), (4, 2), (4, 4), (8, 4)]:
            f = truth.speed(w, p) * (1 + rng.gauss(0, 0.02))
            book.observe(f"s{j}", spec, Report(0.0, f"s{j}", 5, steps_per_s=f, allocation=_alloc(w, p)))
    spec, truth = ps_job("new", MODELS["vgg-16"], batch=512, sync=True, steps=1000)
    model = book.model("new", spec)
    assert model.basis == "type prior" and model.configs == 0
    grid = [(w, p) for w in range(1, 9) for p in range(1, 9)]
    err = sum(abs((model.steps_per_s(w, p) or 0) - truth.speed(w, p)) / truth.speed(w, p) for w, p in grid)
    assert err / len(grid) < 0.10
    other_type, _ = ps_job("x", MODELS["alexnet"], batch=128, sync=True, steps=1000)
    assert book.model("x", other_type).speed is None  # no siblings, no reports: nothing to predict with


def test_a_waiting_job_picks_up_its_type_prior_once_siblings_report() -> None:
    book = ModelBook()
    spec, _ = ps_job("late", MODELS["googlenet"], batch=256, sync=True, steps=1000)
    assert book.model("late", spec).basis == "none"
    sib, truth = ps_job("sib", MODELS["googlenet"], batch=128, sync=True, steps=1000)
    for w, p in [(1, 1), (2, 1), (2, 2), (4, 2), (4, 4), (8, 4)]:
        book.observe("sib", sib, Report(0.0, "sib", 5, steps_per_s=truth.speed(w, p), allocation=_alloc(w, p)))
    assert book.model("late", spec).basis == "type prior"


def test_a_published_model_reads_as_the_book_was_when_it_was_published() -> None:
    """`ModelBook.published` computes speed and remaining on first read, from inputs captured at publish time."""
    book = ModelBook()
    sib, truth = ps_job("sib", MODELS["googlenet"], batch=128, sync=True, steps=1000)
    for w, p in [(1, 1), (2, 1), (2, 2), (4, 2), (4, 4), (8, 4)]:
        book.observe("sib", sib, Report(0.0, "sib", 5, steps_per_s=truth.speed(w, p), allocation=_alloc(w, p)))
    spec, _ = ps_job("j", MODELS["googlenet"], batch=256, sync=True, steps=1000)
    book.observe("j", spec, Report(0.0, "j", 40, steps_per_s=truth.speed(1, 1), allocation=_alloc(1, 1)))
    eager, lazy = book.model("j", spec), book.published("j", spec)
    assert eager.basis == "type prior" and type(lazy) is not type(eager)
    # The book moves on: the job reports on a new configuration, its type's prior learns a new one.
    book.observe("j", spec, Report(1.0, "j", 90, steps_per_s=2 * truth.speed(2, 1), allocation=_alloc(2, 1)))
    book.observe("sib", sib, Report(1.0, "sib", 9, steps_per_s=3 * truth.speed(6, 3), allocation=_alloc(6, 3)))
    assert book.model("j", spec).steps_per_s(4, 2) != eager.steps_per_s(4, 2)  # (what a late read would see)
    fields = ("basis", "step", "remaining", "configs", "batch", "form", "max_workers", "curve")
    assert [getattr(lazy, f) for f in fields] == [getattr(eager, f) for f in fields]
    assert [lazy.steps_per_s(w, p) for w, p in [(1, 1), (4, 2), (8, 4)]] \
        == [eager.steps_per_s(w, p) for w, p in [(1, 1), (4, 2), (8, 4)]]


def _allreduce_rows(sizes: list[tuple[int, int]]) -> list[Row]:
    """Rows of a law whose cross-node sync is no line in the replicas (as the Pollux peer's placements)."""
    cross = {8: 1.0, 12: 1.5, 16: 0.8}
    out = []
    for workers, nodes in sizes:
        sync = 0.0 if workers == 1 else (0.05 if nodes == 1 else cross[workers])
        step = 0.02 + 0.04 * 64 / workers + sync
        out.append(Row(Config(workers, nodes=nodes, batch=64.0), step))
    return out


def test_goodput_law_holds_the_cross_node_slope_at_zero_below_three_multi_node_sizes() -> None:
    rows = _allreduce_rows([(1, 1), (2, 1), (4, 1), (8, 2), (12, 3)])  # two multi-node sizes: 1.0 s, 1.5 s
    plain, flat = fit(Form.ALLREDUCE, rows), fit(Form.ALLREDUCE, rows, cross_slope=False)
    assert plain is not None and flat is not None
    assert plain.theta[5] > 0 and flat.theta[5] == 0.0  # the two-point line climbs; the goodput law's is flat
    at16 = Config(16, nodes=4, batch=64.0)
    assert flat.steps_per_s(at16) > plain.steps_per_s(at16)
    assert 1 / flat.steps_per_s(at16) - (0.02 + 0.04 * 4) == pytest.approx(1.25, rel=0.05)  # their mean


def test_goodput_law_fits_the_cross_node_slope_from_three_multi_node_sizes() -> None:
    rows = _allreduce_rows([(1, 1), (2, 1), (4, 1), (8, 2), (12, 3), (16, 4)])
    plain, flat = fit(Form.ALLREDUCE, rows), fit(Form.ALLREDUCE, rows, cross_slope=False)
    assert plain is not None and flat is not None
    assert flat.theta == (*plain.theta, 0.0, 0.0)  # (one batch: neither local-batch term, `speed.separable`)


def test_packing_weights_count_a_fragmented_multi_node_row_by_its_packing_share() -> None:
    rows = [Row(Config(w, nodes=n, batch=64.0), 1.0) for w, n in [(1, 1), (4, 1), (2, 2), (5, 2), (8, 4), (6, 3)]]
    # a node holds 4 (the densest one-node row): 2 over 2 nodes needs 1, 8 over 4 needs 2, 6 over 3 needs 2
    assert packing_weights(rows) == pytest.approx([1.0, 1.0, 0.5, 1.0, 0.5, 2 / 3])


def test_goodput_law_leans_toward_packed_rows_for_the_cross_node_sync() -> None:
    one_node = [(1, 1, 0.0), (2, 1, 0.05), (4, 1, 0.05)]
    packed, split = (8, 2, 0.8), (2, 2, 2.0)  # a split's sync (1 worker per node) is not a packed size's
    rows = [Row(Config(w, nodes=n, batch=64.0), 0.02 + 0.04 * 64 / w + s) for w, n, s in [*one_node, packed, split]]
    law = fit(Form.ALLREDUCE, rows, cross_slope=False)
    full = fit(Form.ALLREDUCE, rows, [1.0, 1.0, 1.0, 1.0, 2.0], cross_slope=False)  # the split at weight 0.5 x 2
    dropped = fit(Form.ALLREDUCE, rows[:-1], cross_slope=False)
    assert law is not None and full is not None and dropped is not None
    at16 = Config(16, nodes=4, batch=64.0)
    assert dropped.steps_per_s(at16) > law.steps_per_s(at16) > full.steps_per_s(at16)
