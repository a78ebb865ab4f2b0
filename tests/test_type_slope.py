"""An own goodput law keeps its type's cross-node sync slope until it has measured enough multi-node sizes to
fit one (`ModelBook._type_slope`; issue 11, bench/results/trainmaster.md fifteenth look)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pytest

from trainmaster.core.allocation import Allocation, Placement
from trainmaster.core.events import Report
from trainmaster.core.job import BatchRange, Role, Target, simple_job
from trainmaster.models.book import ModelBook
from trainmaster.models.speed import Config, Form, Row, SpeedFit, fit

SLOPE = 0.004  # the truth's cross-node sync per extra replica (s)


def _time(c: Config, level: float) -> float:
    """Seconds per step: compute, then one-node or cross-node sync (`level` + `SLOPE` per replica beyond 2)."""
    w = c.workers
    sync = 0.0 if w == 1 else 0.01 + 0.002 * (w - 2) if c.nodes == 1 else level + SLOPE * (w - 2)
    return 0.05 + 0.0004 * c.batch / w + sync


def _alloc(workers: int, nodes: int) -> Allocation:
    per = -(-workers // nodes)
    return Allocation.of(Placement(Role.WORKER, f"n{i // per}") for i in range(workers))


def _run(book: ModelBook, job: str, shapes: Sequence[tuple[int, int, int]], level: float) -> None:
    spec = simple_job(job, 4, min_gpus=1, max_gpus=64, job_type="t", target=Target(steps=1000),
                      adaptive_batch=BatchRange(128, 4096, 1024))
    for step, (w, n, b) in enumerate(shapes, 1):
        c = Config(w, nodes=n, batch=float(b))
        book.observe(job, spec, Report(time=step, job_id=job, step=10 * step, steps_per_s=1 / _time(c, level),
                                       batch=b, grad_sqr=1.0, grad_var=1.0), _alloc(w, n))


ONE_NODE = [(1, 1, 256), (1, 1, 1024), (2, 1, 1024), (4, 1, 1024)]


def _book(type_slope: bool, own_multi: Sequence[tuple[int, int]] = ((8, 2),)) -> ModelBook:
    """Siblings at 8/2, 16/4, 32/8 (cross-node level 0.05 s); job x (a slower network, 0.10 s) at `own_multi`."""
    book = ModelBook()
    book.type_slope = type_slope
    for s, (w, n) in enumerate([(8, 2), (16, 4), (32, 8)]):
        _run(book, f"s{s}", [*ONE_NODE, (w, n, 1024), (w, n, 2048)], 0.05)
    _run(book, "x", [*ONE_NODE, *((w, n, b) for w, n in own_multi for b in (1024, 2048))], 0.10)
    return book


def _errors(law: SpeedFit) -> Iterator[float]:
    for w, n in [(16, 4), (32, 8), (64, 16)]:
        c = Config(w, nodes=n, batch=1024.0)
        yield law.steps_per_s(c) * _time(c, 0.10) - 1  # predicted / true steps/s - 1


def test_an_own_fit_from_one_multi_node_size_keeps_its_types_slope() -> None:
    new, old = _book(True), _book(False)
    law, basis = new.speed(new.learners["x"], optimistic=True)
    plain, _ = old.speed(old.learners["x"], optimistic=True)
    assert basis == "own fit" and isinstance(law, SpeedFit) and isinstance(plain, SpeedFit)
    prior = new.priors.fitted("t", Form.ALLREDUCE, 6, cross_slope=False)
    assert prior is not None and law.theta[5] == prior.theta[5] > 0.5 * SLOPE  # the type's slope, held
    assert max(_errors(law)) < 0.2  # 16 to 64 GPUs at most 20% fast (the type's slope carries x's own rows too)
    assert max(_errors(plain)) > 0.4  # the old fit: the slope set by the siblings' faint weight, 64 GPUs 50% fast


def test_three_own_multi_node_sizes_fit_their_own_slope() -> None:
    new, old = (_book(flag, [(8, 2), (12, 3), (16, 4)]) for flag in (True, False))
    law = new.speed(new.learners["x"], optimistic=True)[0]
    assert law == old.speed(old.learners["x"], optimistic=True)[0]
    assert isinstance(law, SpeedFit) and law.theta[5] == pytest.approx(SLOPE, rel=0.3)


def test_a_type_without_three_multi_node_sizes_leaves_the_law_as_it_was() -> None:
    books = []
    for flag in (True, False):
        book = ModelBook()
        book.type_slope = flag
        _run(book, "s0", [*ONE_NODE, (8, 2, 1024)], 0.05)
        _run(book, "x", [*ONE_NODE, (8, 2, 1024), (8, 2, 2048)], 0.10)
        books.append(book.speed(book.learners["x"], optimistic=True)[0])
    assert books[0] == books[1]
    assert isinstance(books[0], SpeedFit) and books[0].theta[5] == 0.0  # flat: Pollux's optimism, as before


def test_fit_holds_the_given_slope_and_fits_the_rest() -> None:
    rows = [Row(Config(w, nodes=n, batch=float(b)), _time(Config(w, nodes=n, batch=float(b)), 0.05))
            for w, n, b in [*ONE_NODE, (8, 2, 1024), (8, 2, 2048)]]
    law = fit(Form.ALLREDUCE, rows, cross_slope=False, slope=SLOPE)
    assert law is not None and law.theta[5] == SLOPE
    for c in (Config(64, nodes=16, batch=1024.0), Config(3, batch=600.0)):
        assert law.steps_per_s(c) == pytest.approx(1 / _time(c, 0.05), rel=1e-6)
    flat = fit(Form.ALLREDUCE, rows, cross_slope=False)
    assert flat is not None and flat.theta[5] == 0.0
