"""A report its job's learner only counts takes the sink's fast path (`Learning.fast_repeats`,
`ModelBook.repeat`, `JobLearner.tally`): its counts kept aside and settled at the next read. Every answer, count,
mean, rate, prior, published model and plan as on the general path, bit for bit."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import pytest
from tests.replay_helpers import same_plans
from tests.test_full21_kept_models import _alloc, _spec
from tests.test_full22_counted_repeats import _philly_engine, _state
from tests.test_model_groups import _philly
from tests.test_once_per_snapshot import _ps, _replay

from trainmaster.controller.learning import Learning
from trainmaster.core.allocation import Allocation
from trainmaster.core.cluster import parse_shorthand
from trainmaster.core.events import Report
from trainmaster.engines.sim.engine import SimConfig, SimEngine
from trainmaster.models.book import JobLearner, LazyJobModel, ModelBook
from trainmaster.models.speed import Config, Row
from trainmaster.policies.snapshot import Plan

Send = Callable[..., bool]


def _sender(book: ModelBook, fast: bool, taken: list[int]) -> Callable[[str, int, float, Allocation], bool]:
    """One report of job `name` to `book` as `Learning` sends it: `ModelBook.repeat` first where `fast` (its GPU
    type kept), else (or where it declines) `observe`; answers `observe`'s (False for a taken repeat)."""
    specs = {name: _spec(name=name) for name in ("a", "b")}

    def send(name: str, step: int, speed: float, alloc: Allocation, gpu: str | None = "v100",
             **extra: object) -> bool:
        spec = specs[name]
        report = Report(0.0, name, step, steps_per_s=speed, allocation=alloc, **extra)  # type: ignore[arg-type]
        if fast and gpu is not None and book.repeat(name, spec.job_type, report, gpu) is not None:
            taken[0] += 1
            return False
        return book.observe(name, spec, report, alloc, gpu)

    return send


def _feed(book: ModelBook, fast: bool) -> tuple[list[object], int]:
    """Repeats past counts 2, 4, 8, 16 (read in between: settled, then kept aside again; the 16th without a GPU
    type), a new speed, an equal
    allocation that is another object, reports with a loss, an epoch, a batch or no GPU type, an own rate whose
    mean is not the report's speed, a second job on another GPU type (the pooled rates then hold two: no fast
    path). Answers each report's answer and, after some, the learner's rows read (settling them)."""
    taken = [0]
    send = _sender(book, fast, taken)
    one, two = _alloc(1), _alloc(2)
    out: list[object] = []
    for step in range(1, 21):  # (16: no GPU type, no rates: `observe` settles the learner itself)
        out.append(send("a", step, 10.0, one, gpu=None if step == 16 else "v100"))
        if step in (6, 11):  # (a read between repeats: the counts so far, then more kept aside)
            out.append(tuple(book.learners["a"].rows.values()))
    out.append(send("a", 21, 11.0, one))  # (the mean moves: no repeat until it is 11's)
    out.extend(send("a", step, 11.0, one) for step in range(22, 27))
    out.append(send("a", 27, 11.0, one, loss=2.0))
    out.append(send("a", 28, 11.0, one, epoch=0.5))
    out.append(send("a", 29, 11.0, one, batch=64))
    out.append(send("a", 30, 11.0, one, gpu=None))
    out.append(send("a", 31, 11.0, _alloc(1)))  # (equal, not the same object)
    out.extend(send("a", step, 20.0, two) for step in range(32, 45))
    c2 = next(c for c in book.learners["a"].rows if c.workers == 2)
    book.learners["a"].rates.add(c2, "v100", 30.0)  # (its own rate's mean is not 20 now: no fast path)
    out.extend(send("a", step, 20.0, two) for step in range(45, 50))
    out.append(send("b", 1, 5.0, one, gpu="k80"))
    out.extend(send("a", step, 20.0, two) for step in range(50, 60))
    return out, taken[0]


def test_a_repeat_kept_aside_learns_as_the_general_path_bit_for_bit() -> None:
    """The same reports with and without the fast path: the same answers, the same rows read between repeats,
    the same learned state (every count, mean, own and pooled rate, their versions, the priors)."""
    fast, slow = ModelBook(), ModelBook()
    fast_out, taken = _feed(fast, True)
    slow_out, none = _feed(slow, False)
    assert none == 0 and taken > 20
    assert fast_out == slow_out
    assert _state(fast) == _state(slow)
    assert fast.learners["a"].version == slow.learners["a"].version == 59


def test_which_repeats_are_kept_aside() -> None:
    """Only a counted repeat whose count is not a power of two, whose GPU type's own rate's mean is its speed,
    on a type the pooled rates alone hold, is kept aside; a read settles it, `observe` settles first."""
    book, spec = ModelBook(), _spec()
    one = _alloc(1)

    def repeat(step: int, speed: float = 10.0, gpu: str = "v100", **extra: object) -> bool:
        report = Report(0.0, "a", step, steps_per_s=speed, allocation=one, **extra)  # type: ignore[arg-type]
        return book.repeat("a", spec.job_type, report, gpu) is not None

    assert not repeat(1)  # (no learner yet)
    book.observe("a", spec, Report(0.0, "a", 1, steps_per_s=10.0, allocation=one), one, "v100")
    assert not repeat(2)  # (the count would be 2: a refit)
    book.observe("a", spec, Report(0.0, "a", 2, steps_per_s=10.0, allocation=one), one, "v100")
    learner = book.learners["a"]
    assert repeat(3)
    assert learner.version == 3 and learner.step == 3.0 and learner._tally == 1
    assert not repeat(4)  # (4: a refit)
    assert not repeat(4, speed=12.0) and not repeat(4, loss=1.0) and not repeat(4, gpu="k80")
    c = next(iter(learner.rows))  # (read: settled)
    assert learner._tally == 0 and learner.rows[c].count == 3 and learner.rates.rows[c]["v100"] == (10.0, 3)
    book.observe("a", spec, Report(0.0, "a", 4, steps_per_s=10.0, allocation=one), one, "v100")
    for step in range(5, 8):
        assert repeat(step)
    assert learner._tally == 3 and book.type_rates["cnn"].rows[c]["v100"] == (10.0, 7)  # (pooled: at once)
    assert not repeat(8)  # (8: a refit)
    assert book.observe("a", spec, Report(0.0, "a", 8, steps_per_s=10.0, allocation=one), one, "v100")
    assert learner._tally == 0 and learner.rows[c] == Row(c, learner.rows[c].y, 8)
    assert learner.rates.rows[c]["v100"] == (10.0, 8) and learner.rates.version == 8
    book.observe("b", _spec(name="b"), Report(0.0, "b", 1, steps_per_s=5.0, allocation=one), one, "k80")
    assert not repeat(9)  # (the pooled rates hold two types: `observe` calls `moving`)


@contextmanager
def _counted() -> Iterator[list[int]]:
    """Counts the reports `ModelBook.repeat` took."""
    taken = [0]
    real = ModelBook.repeat

    def counting(self: ModelBook, *args: object) -> JobLearner | None:
        got = real(self, *args)  # type: ignore[arg-type]
        taken[0] += got is not None
        return got

    ModelBook.repeat = counting  # type: ignore[method-assign]
    try:
        yield taken
    finally:
        ModelBook.repeat = real  # type: ignore[method-assign]


def _inputs(learning: Learning) -> list[object]:
    """The rows (with counts) each live published model was built from: settled before it was built."""
    return [(jid, m.__dict__["_inputs"][0]) for jid, m in learning.controller.models.items()
            if type(m) is LazyJobModel]


def _run(preset: str, make: Callable[[], SimEngine], on: bool) -> tuple[object, list[Plan], Learning, int, object]:
    """`test_once_per_snapshot._replay` with the fast path on or off: every snapshot's models, the plans, the
    learning, the reports it took, and each snapshot's published models' rows."""
    rows: list[object] = []

    def configure(learning: Learning) -> None:
        learning.fast_repeats = on
        learning.controller.before_snapshot.append(lambda: rows.append(_inputs(learning)))

    with _counted() as taken:
        models, plans, learning = _replay(preset, True, make(), configure)
    return models, plans, learning, taken[0], rows


def _same(preset: str, make: Callable[[], SimEngine]) -> int:
    fast_models, fast, learning, taken, fast_rows = _run(preset, make, True)
    slow_models, slow, reference, none, slow_rows = _run(preset, make, False)
    assert none == 0
    assert fast_models == slow_models
    assert fast_rows == slow_rows
    same_plans(fast, slow, least=40)
    assert _state(learning.book) == _state(reference.book)
    assert (learning.spared, learning.early) == (reference.spared, reference.early)
    return taken


@pytest.mark.parametrize("preset", ["trainmaster", "optimus"])
def test_philly_fast_repeats_plan_and_learn_as_the_general_path(preset: str, shared_data: Path) -> None:
    """Philly's first jobs on 4x8: every snapshot's models (and the rows they were built from) and every plan as
    the general path's, the book's state at the end bit for bit; most reports took the fast path."""
    make = _philly_engine(_philly(shared_data))
    assert _same(preset, make) > 1000


def test_philly_on_two_gpu_types_takes_no_fast_path(shared_data: Path) -> None:
    """Philly's jobs on v100 and k80 nodes: the pooled rates hold both types before any job repeats (each report
    may move the type's relative GPU speeds: `observe` calls `moving`), so no fast path; the same models, plans
    and state."""
    workload = _philly(shared_data)
    taken = _same("trainmaster", lambda: SimEngine(parse_shorthand("2x8:v100+2x8:k80"), workload,
                                                     SimConfig(report_interval=60, seed=2)))
    assert taken == 0


def test_fast_repeats_on_losses_noise_and_two_gpu_types() -> None:
    """Parameter-server jobs with loss targets, speed and loss noise on two GPU types: no report repeats (each
    has a loss); the same models, plans and state as with the fast path off."""
    assert _same("trainmaster", lambda: _ps("1x4:v100+1x4:k80")) == 0


def test_philly_with_speed_noise_takes_no_fast_path(shared_data: Path) -> None:
    """Philly with speed noise: no report repeats its job's last speed; the same models, plans and state."""
    workload = _philly(shared_data)
    assert _same("optimus", lambda: SimEngine(parse_shorthand("4x8"), workload,
                                              SimConfig(report_interval=60, speed_noise=0.02, seed=2))) == 0


def test_a_learner_without_reports_reads_empty() -> None:
    """(`rows` and `rates` of a fresh learner: nothing kept aside.)"""
    learner = JobLearner("a", _spec())
    assert learner.rows == {} and learner.rates.rows == {} and learner._tally == 0
    assert Config(1, 0, 1, 1.0) not in learner.rows


def test_repeats_on_two_gpu_types_of_a_job_without_a_type_are_kept_apart() -> None:
    """A job without a type (no pooled rates) whose one allocation reports on two GPU types in turn (a node that
    changed type): repeats are kept aside per type, settled before the other type's; the same state bit for
    bit as the general path's."""
    def feed(fast: bool) -> tuple[ModelBook, int]:
        book, spec, one = ModelBook(), replace(_spec(), job_type=None), _alloc(1)
        taken = 0
        for step, gpu in enumerate(["k80", "v100", "v100", "k80", "k80", "v100", "v100", "k80", "v100", "k80",
                                    "k80", "k80", "v100", "v100", "v100"], start=1):
            report = Report(0.0, "a", step, steps_per_s=10.0, allocation=one)
            if fast and book.repeat("a", None, report, gpu) is not None:
                taken += 1
                continue
            book.observe("a", spec, report, one, gpu)
        return book, taken

    fast, taken = feed(True)
    slow, none = feed(False)
    assert none == 0 and taken >= 5
    assert _state(fast) == _state(slow)
