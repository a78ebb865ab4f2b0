"""A report that repeats its job's last speed on the same allocation only counts (`JobLearner.count_repeats`):
every count, row mean, pooled GPU-type mean, prior refit, model and plan as the general path's, bit for bit."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from tests.replay_helpers import same_plans
from tests.test_full21_kept_models import _alloc, _spec
from tests.test_model_groups import _philly
from tests.test_once_per_snapshot import _ps, _replay

from trainmaster.controller.learning import Learning
from trainmaster.core.allocation import Allocation
from trainmaster.core.cluster import parse_shorthand
from trainmaster.core.events import Report
from trainmaster.engines.sim.engine import SimConfig, SimEngine
from trainmaster.models import book as book_module
from trainmaster.models.book import JobLearner, ModelBook
from trainmaster.models.speed import Config, Form, Row
from trainmaster.policies.snapshot import Plan
from trainmaster.workloads.base import Workload


@contextmanager
def _counting(on: bool) -> Iterator[None]:
    """`JobLearner.count_repeats` set for the block (a class switch), restored after."""
    was = JobLearner.count_repeats
    JobLearner.count_repeats = on
    try:
        yield
    finally:
        JobLearner.count_repeats = was


def _state(book: ModelBook) -> object:
    """Everything the book learned, bit for bit: each learner's rows (config, mean, count), version, step, epoch,
    maximum workers, loss points and GPU-type rates; the pooled rates; the priors' rows and versions."""
    learners = {jid: (tuple(lr.rows.values()), lr.version, lr.step, lr.epoch, lr.max_workers, lr.steps, lr.losses,
                      {c: dict(per) for c, per in lr.rates.rows.items()}, lr.rates.version)
                for jid, lr in book.learners.items()}
    pooled = {kind: ({c: dict(per) for c, per in r.rows.items()}, r.version, r.types)
              for kind, r in book.type_rates.items()}
    priors = {key: {jid: dict(rows) for jid, rows in jobs.items()} for key, jobs in book.priors._rows.items()}
    return learners, pooled, priors, dict(book.priors.version), book.priors.updates


def _feed(book: ModelBook, spec_name: str = "a") -> list[bool]:
    """One job's reports: repeats on one allocation (counts past 2, 4, 8), a new speed there, an equal allocation
    that is another object, repeats with a loss, an epoch or a batch, a second job of the type on another GPU type."""
    spec = _spec(name=spec_name)
    other = _spec(name="b")
    one, two = _alloc(1), _alloc(2)
    out: list[bool] = []

    def send(step: int, speed: float, alloc: Allocation, gpu: str | None = "v100", **extra: object) -> None:
        report = Report(0.0, spec.name, step, steps_per_s=speed, allocation=alloc, **extra)  # type: ignore[arg-type]
        out.append(book.observe(spec.name, spec, report, alloc, gpu))

    for step in range(1, 12):
        send(step, 10.0, one)
    send(12, 11.0, one)  # (the mean moves: a repeat of 11.0 now moves it too)
    for step in range(13, 17):
        send(step, 11.0, one)
    send(17, 11.0, one, loss=2.0)
    send(18, 11.0, one, epoch=0.5)
    send(19, 11.0, one, batch=64)
    send(20, 11.0, _alloc(1))  # (equal, not the same object)
    for step in range(21, 30):
        send(step, 20.0, two)
    send(30, 20.0, two, loss=1.5)  # (each on a row whose mean is 20's: a repeat but for it)
    send(31, 20.0, two, epoch=0.25)
    send(32, 20.0, two, batch=64)
    for step in range(33, 40):
        send(step, 20.0, two)
    send(40, 20.0, two, gpu=None)
    report = Report(0.0, "b", 1, steps_per_s=5.0, allocation=one)
    out.append(book.observe("b", other, report, one, "k80"))
    for step in range(41, 50):
        send(step, 20.0, two)
    return out


def test_a_counted_repeat_learns_as_the_general_path_bit_for_bit(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same reports with and without counted repeats: the same answers (refits at counts 2, 4, 8, ...) and
    the same learned state, every mean and count; most reports were counted."""
    calls = _general(monkeypatch)
    with _counting(True):
        fast = ModelBook()
        fast_out = _feed(fast)
    counted = calls[0]
    with _counting(False):
        slow = ModelBook()
        slow_out = _feed(slow)
    assert 10 < counted < calls[0] - counted - 30
    assert fast_out == slow_out
    assert _state(fast) == _state(slow)
    assert fast.learners["a"].version == slow.learners["a"].version == 49
    assert fast.type_rates["cnn"].types == {"v100", "k80"}


def test_a_repeat_with_a_new_speed_or_allocation_takes_the_general_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only a report with the speed whose `y` the row's mean now is, on the same allocation object, without a
    loss, epoch or batch, is counted as a repeat: the others compute their `y` (`time_like`)."""
    calls = _general(monkeypatch)
    book, spec = ModelBook(), _spec()
    one = _alloc(1)

    def send(speed: float, alloc: Allocation, **extra: object) -> int:
        before = calls[0]
        book.observe(spec.name, spec, Report(0.0, spec.name, 1, steps_per_s=speed, allocation=alloc,
                                             **extra), alloc)  # type: ignore[arg-type]
        return calls[0] - before

    assert send(10.0, one) == 1
    assert send(10.0, one) == 0  # (a repeat: counted)
    assert send(12.0, one) == 1  # a new speed
    assert send(12.0, one) == 1  # (the row's mean is not 12's yet: no repeat)
    assert send(12.0, _alloc(1)) == 1  # another allocation object
    assert send(12.0, _alloc(1), loss=1.0) == 1
    assert send(12.0, _alloc(1), epoch=1.0) == 1
    assert send(12.0, _alloc(1), batch=2) == 1
    assert book.learners[spec.name].rows == {
        Config(1, 0, 1, 1.0): Row(Config(1, 0, 1, 1.0), book.learners[spec.name].rows[Config(1, 0, 1, 1.0)].y, 7),
        Config(1, 0, 1, 2.0): Row(Config(1, 0, 1, 2.0), 1 / 12.0, 1)}


def _general(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the reports that take the general path (each computes its `y` once: `book.time_like`)."""
    calls = [0]
    real = book_module.time_like

    def counting(form: Form, c: Config, steps_per_s: float) -> float:
        calls[0] += 1
        return real(form, c, steps_per_s)

    monkeypatch.setattr(book_module, "time_like", counting)
    return calls


def _run(preset: str, make: Callable[[], SimEngine], on: bool, monkeypatch: pytest.MonkeyPatch
         ) -> tuple[object, list[Plan], Learning, int]:
    """`test_once_per_snapshot._replay` with counted repeats on or off: every snapshot's models, the plans, the
    learning, and how many reports took the general path."""
    with monkeypatch.context() as patch:
        calls = _general(patch)
        with _counting(on):
            models, plans, learning = _replay(preset, True, make())
    return models, plans, learning, calls[0]


def _philly_engine(workload: Workload) -> Callable[[], SimEngine]:
    return lambda: SimEngine(parse_shorthand("4x8"), workload, SimConfig(report_interval=60, seed=2))


@pytest.mark.parametrize("preset", ["trainmaster", "optimus"])
def test_philly_counted_repeats_plan_and_learn_as_the_general_path(preset: str, shared_data: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Philly's first jobs on 4x8: every snapshot's models and every plan as the general path's, the book's state
    at the end bit for bit (its pooled GPU-type rates and the priors' rows), and most reports counted."""
    make = _philly_engine(_philly(shared_data))
    fast_models, fast, learning, fast_general = _run(preset, make, True, monkeypatch)
    slow_models, slow, reference, slow_general = _run(preset, make, False, monkeypatch)
    assert fast_models == slow_models
    same_plans(fast, slow, least=40)
    assert _state(learning.book) == _state(reference.book)
    assert fast_general * 2 < slow_general  # (most reports repeat their job's last one)


def test_counted_repeats_on_loss_targets_and_two_gpu_types(monkeypatch: pytest.MonkeyPatch) -> None:
    """Parameter-server jobs with loss targets on two GPU types (`test_once_per_snapshot`'s replay): reports
    with losses take the general path; every snapshot's models and plans as with counted repeats off."""
    fast_models, fast, learning, fast_general = _run("trainmaster", lambda: _ps("1x4:v100+1x4:k80"), True,
                                                     monkeypatch)
    slow_models, slow, reference, slow_general = _run("trainmaster", lambda: _ps("1x4:v100+1x4:k80"), False,
                                                      monkeypatch)
    assert fast_models == slow_models
    same_plans(fast, slow, least=40)
    assert _state(learning.book) == _state(reference.book)
    assert fast_general == slow_general  # (every report carries a loss)
