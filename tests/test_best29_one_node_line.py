"""The goodput law's one-node sync from one measured one-node multi-GPU size: a line through 1 GPU (best29).

`speed.fit(one_node_line=True)` (the goodput law only; `ModelBook`'s own fits pass it, the type priors do not):
with one such size, `c1 + d1 (K - 2)` is one number and NNLS would put it in either term; it is read as
`s (K - 1)` instead (`c1 = d1`). With two sizes measured the terms fit apart as before.
"""

from __future__ import annotations

import pytest

from trainmaster.core.allocation import Allocation, Placement
from trainmaster.core.events import Report
from trainmaster.core.job import BatchRange, Role, Target, simple_job
from trainmaster.models.book import ModelBook
from trainmaster.models.speed import Config, Form, MicroFit, Row, SpeedPredictor, fit, one_node_sizes

SYNC = 0.03  # seconds a step per GPU past the first on one node (the truth's one-node sync: a line through 1 GPU)


def _step(c: Config, c1: float = SYNC, d1: float = SYNC) -> float:
    """Seconds per step: 20 ms fixed, 0.4 ms a local sample, the one-node sync `c1 + d1 (K - 2)`, 0.3 s across."""
    local = c.batch / c.workers
    one_node = c1 + d1 * (c.workers - 2) if c.nodes == 1 and c.workers > 1 else 0.0
    return float(0.02 + 0.0004 * local + one_node + (0.3 if c.nodes > 1 else 0.0))


def _rows(*one_node: int, c1: float = SYNC, d1: float = SYNC) -> list[Row]:
    """1 GPU at two batches, the given one-node sizes and 8 GPUs on 2 nodes, all read off `_step`."""
    configs = [Config(1, batch=256.0), Config(1, batch=1024.0), *(Config(k, batch=256.0) for k in one_node),
               Config(8, nodes=2, batch=256.0)]
    return [Row(c, _step(c, c1, d1)) for c in configs]


def _error(law: SpeedPredictor, k: int) -> float:
    c = Config(k, batch=256.0)
    return float(abs(law.steps_per_s(c) * _step(c) - 1.0))


@pytest.mark.parametrize("size", [2, 3, 4])
def test_one_measured_one_node_size_reads_the_others_on_a_line_through_one_gpu(size: int) -> None:
    rows = _rows(size)
    assert one_node_sizes(rows) == 1
    law = fit(Form.ALLREDUCE, rows, cross_slope=False, one_node_line=True)
    assert law is not None and law.theta[2] == law.theta[3] == pytest.approx(SYNC, rel=1e-6)
    for k in (1, 2, 3, 4):
        assert _error(law, k) < 0.02, k
    if size != 3:  # (at 3 the two columns are equal: NNLS may split them either way)
        plain = fit(Form.ALLREDUCE, rows, cross_slope=False)
        assert plain is not None and max(_error(plain, k) for k in (2, 3, 4)) > 0.1  # flat, or zero at 2 GPUs


def test_two_measured_one_node_sizes_fit_the_terms_apart() -> None:
    """A sync that is not a line through 1 GPU (`c1` 50 ms, `d1` 20 ms): read where it was not measured."""
    rows = _rows(3, 4, c1=0.05, d1=0.02)
    assert one_node_sizes(rows) == 2
    law = fit(Form.ALLREDUCE, rows, cross_slope=False, one_node_line=True)
    assert law is not None
    assert law.theta[2] == pytest.approx(0.05, rel=1e-6) and law.theta[3] == pytest.approx(0.02, rel=1e-6)
    probe = Config(2, batch=256.0)
    assert law.steps_per_s(probe) * _step(probe, 0.05, 0.02) == pytest.approx(1.0, rel=1e-6)


def test_the_plain_speed_law_ignores_it_and_without_a_one_node_size_both_terms_stay_zero() -> None:
    rows = _rows(4)
    on = fit(Form.ALLREDUCE, rows, one_node_line=True)
    off = fit(Form.ALLREDUCE, rows)
    assert on is not None and off is not None and on.theta == off.theta  # optimus' and edl's law
    none = fit(Form.ALLREDUCE, _rows(), cross_slope=False, one_node_line=True)
    assert none is not None and none.theta[2] == none.theta[3] == 0.0


def _alloc(workers: int, nodes: int) -> Allocation:
    per = workers // nodes
    return Allocation.of(Placement(Role.WORKER, f"n{i // per}") for i in range(workers))


def test_the_books_own_goodput_law_draws_the_line_and_the_type_prior_does_not() -> None:
    book = ModelBook()
    spec = simple_job("a", 4, min_gpus=1, max_gpus=16, job_type="yolov3", target=Target(steps=1000),
                      adaptive_batch=BatchRange(128, 4096, 256))
    shapes = [(1, 1, 256), (1, 1, 1024), (4, 1, 256), (8, 2, 256)]
    for step, (w, n, b) in enumerate(shapes, 1):
        c = Config(w, nodes=n, batch=float(b))
        book.observe("a", spec, Report(time=step, job_id="a", step=10 * step, steps_per_s=1 / _step(c), batch=b,
                                       grad_sqr=1.0, grad_var=1.0), _alloc(w, n))
    law, basis = book.speed(book.learners["a"], optimistic=True)
    assert basis == "own fit" and isinstance(law, MicroFit)
    assert law.theta[2] == law.theta[3] == pytest.approx(SYNC, rel=1e-6)
    assert _error(law, 2) < 0.02
    prior = book.priors.fitted("yolov3", Form.ALLREDUCE, 1, cross_slope=False)
    assert prior is not None and prior.theta[2] != prior.theta[3]  # the type's prior: the terms as NNLS put them
