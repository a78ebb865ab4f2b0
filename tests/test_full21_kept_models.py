"""A reporting job's model renewed in place (`Learning.keep_models`, `ModelBook.republished`, `LazyJobModel.renew`)
where it reads as a model built now would: its step read live from its learner, every other field a reader may
have read unchanged (or not read yet). Caches kept by model identity then serve; none serves a stale value."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from tests.replay_helpers import same_plans
from tests.test_learning_refresh import _seen
from tests.test_model_groups import _philly
from tests.test_once_per_snapshot import _replay

from trainmaster.controller.learning import Learning
from trainmaster.controller.loop import Controller
from trainmaster.core.allocation import Allocation, Placement
from trainmaster.core.cluster import parse_shorthand
from trainmaster.core.events import Report
from trainmaster.core.job import JobSpec, Role, Target, simple_job
from trainmaster.engines.sim.engine import SimConfig, SimEngine
from trainmaster.models.book import JobModel, LazyJobModel, ModelBook
from trainmaster.models.speed import Config, Form, Row, SpeedFit, deferred_fit, fit
from trainmaster.policies.las import RemainingOrder
from trainmaster.policies.registry import make_policy
from trainmaster.policies.snapshot import Plan, Snapshot
from trainmaster.workloads.base import Workload


def _alloc(workers: int, nodes: int = 1) -> Allocation:
    return Allocation.of(Placement(Role.WORKER, f"n{i % nodes}") for i in range(workers))


def _spec(target: Target | None = None, name: str = "a") -> JobSpec:
    return simple_job(name, 1, max_gpus=4, target=target or Target(), job_type="cnn")


def _report(book: ModelBook, spec: JobSpec, step: int, speed: float = 10.0, workers: int = 1,
            loss: float | None = None, nodes: int = 1) -> None:
    alloc = _alloc(workers, nodes)
    book.observe(spec.name, spec, Report(0.0, spec.name, step, loss=loss, steps_per_s=speed, allocation=alloc),
                 alloc)


def _fresh(book: ModelBook, spec: JobSpec) -> JobModel:
    """A model built now (`published`); reading it moves nothing the kept one reads."""
    return book.published(spec.name, spec)


def test_a_step_only_report_keeps_the_model_and_it_reads_the_new_step() -> None:
    book, spec = ModelBook(), _spec()
    _report(book, spec, 10)
    first = book.republished(spec.name, spec, None)
    assert isinstance(first, LazyJobModel) and first.step == 10.0
    assert first.remaining is None and first.speed is not None  # (read: renewal must keep them)
    for step in (20, 35, 50):
        _report(book, spec, step)
        kept = book.republished(spec.name, spec, first)
        assert kept is first
        assert kept.step == float(step) and _seen(kept) == _seen(_fresh(book, spec))


def test_a_steps_target_read_builds_a_new_model_unread_keeps_it_with_the_new_step() -> None:
    """The remaining steps read `step`: once read, the next report's model is a new one reading the new step;
    unread, the model is kept and reads the new step when first asked."""
    book, spec = ModelBook(), _spec(Target(steps=1000))
    _report(book, spec, 100)
    first = book.republished(spec.name, spec, None)
    assert first.remaining == 900.0
    _report(book, spec, 300)
    second = book.republished(spec.name, spec, first)
    assert second is not first and second.remaining == 700.0 and first.remaining == 900.0
    _report(book, spec, 400)
    third = book.republished(spec.name, spec, second)
    assert third is not second  # (read above)
    _report(book, spec, 450)
    assert book.republished(spec.name, spec, third) is third  # (unread: kept)
    assert third.remaining == 550.0 and _seen(third) == _seen(_fresh(book, spec))


def test_the_speed_once_read_keeps_its_inputs_unread_takes_the_new_ones() -> None:
    """A sibling's report moves the type's prior: a model whose speed was read is built anew; one whose speed
    nobody read yet is kept and reads the new prior's speed."""
    book, spec, other = ModelBook(), _spec(), _spec(name="b")
    _report(book, spec, 10)
    step = 0
    for workers, nodes in ((1, 1), (2, 1), (2, 2), (4, 1), (4, 2), (4, 4)):  # (the sibling's: the prior fits)
        step += 10
        _report(book, other, step, speed=5.0 * workers / nodes ** 0.1, workers=workers, nodes=nodes)
    first = book.republished(spec.name, spec, None)
    assert first.basis == "type prior"  # (read)
    models = [first]
    for read, workers, nodes in ((True, 8, 2), (False, 8, 4), (False, 8, 8), (False, 16, 4)):  # (new shapes: refits)
        step += 10
        _report(book, other, step, speed=5.0 * workers / nodes ** 0.1, workers=workers, nodes=nodes)
        _report(book, spec, step)
        models.append(book.republished(spec.name, spec, models[-1]))
        if read:
            assert models[-1].speed is not models[-2].speed
    assert models[1] is not first and models[2] is not models[1]  # (read: built anew)
    assert models[3] is models[2] and models[4] is models[2]  # (unread since: kept)
    kept, fresh = models[4], _fresh(book, spec)
    assert kept.speed is not None and fresh.speed is not None and kept.basis == "type prior"
    assert _seen(kept) == _seen(fresh) != _seen(models[1])


def test_a_new_mean_speed_or_shape_or_curve_builds_a_new_model() -> None:
    book, spec = ModelBook(), _spec()
    _report(book, spec, 10)
    model = book.republished(spec.name, spec, None)
    _ = model.speed
    _report(book, spec, 20, speed=12.0)  # (the row's mean moves: the speed read above would not)
    moved = book.republished(spec.name, spec, model)
    assert moved is not model and _seen(moved) == _seen(_fresh(book, spec))
    _report(book, spec, 30, workers=2)  # (a new configuration: `configs` and `max_workers` move)
    shaped = book.republished(spec.name, spec, moved)
    assert shaped is not moved and shaped.configs == 2 and shaped.max_workers == 2
    curved: JobModel = shaped
    for step in range(40, 120, 10):
        _report(book, spec, step, workers=2, loss=1.0 / step + 0.1)
        before = curved
        curved = book.republished(spec.name, spec, curved)
        assert (curved is before) == (curved.curve is before.curve)  # (a refit curve: a new model)
    assert curved.curve is not None and _seen(curved) == _seen(_fresh(book, spec))


def test_an_eager_model_is_not_kept() -> None:
    """Own fits (from `own_min` shapes) are built by `model`, as before."""
    book, spec = ModelBook(), _spec()
    for workers, step in ((1, 10), (2, 20), (4, 30)):
        _report(book, spec, step, workers=workers)
    model = book.republished(spec.name, spec, None)
    assert type(model) is JobModel
    _report(book, spec, 40, workers=4)
    assert book.republished(spec.name, spec, model) is not model


Record = tuple[list[Plan], int, int, int]


def _audited(audits: list[int]) -> Callable[..., JobModel]:
    """`ModelBook.republished` that checks each model it hands out, kept or built, against `published`'s built at
    the same moment (the reference) by what a policy can read of it; it reads a copy, so a kept model's fields
    stay unread (its later renewals take the new inputs as without the audit)."""
    republished = ModelBook.republished

    def audited(book: ModelBook, job_id: str, spec: JobSpec, last: JobModel | None) -> JobModel:
        got = republished(book, job_id, spec, last)
        copy = object.__new__(type(got))
        copy.__dict__.update(got.__dict__)
        assert _seen(copy) == _seen(book.published(job_id, spec))
        audits[0] += 1
        return got

    return audited


def _run(workload: Workload, preset: str, keep: bool, audit: bool = False) -> Record:
    """One Philly replay: its plans, how many `LazyJobModel`s were built, how many `RemainingOrder` keys were
    worked out and how many models were audited (`_audited`)."""
    engine = SimEngine(parse_shorthand("4x8"), workload, SimConfig(report_interval=60, seed=2))
    policy = make_policy(preset)
    plans: list[Plan] = []
    built, keys, audits = [0], [0], [0]
    lazy_init, republished = LazyJobModel.__init__, ModelBook.republished

    def counting(self: LazyJobModel, *args: object, **kwargs: object) -> None:
        built[0] += 1
        lazy_init(self, *args, **kwargs)  # type: ignore[arg-type]

    order = getattr(policy, "order", None)
    if isinstance(order, RemainingOrder):

        class Counting(dict[str, object]):
            def __setitem__(self, key: str, value: object) -> None:
                keys[0] += 1
                super().__setitem__(key, value)

        order.keys = Counting(order.keys)  # type: ignore[assignment]

    class Recording:
        name, uses_models, interval, reads_few_jobs = policy.name, True, policy.interval, policy.reads_few_jobs

        def decide(self, snap: Snapshot) -> Plan:
            plans.append(policy.decide(snap))
            return plans[-1]

    controller = Controller(engine, Recording())  # type: ignore[arg-type]
    learning = next(s for s in controller.report_sinks if isinstance(s, Learning))
    learning.keep_models = keep
    LazyJobModel.__init__ = counting  # type: ignore[method-assign]
    if audit:
        ModelBook.republished = _audited(audits)  # type: ignore[method-assign]
    try:
        controller.run()
    finally:
        LazyJobModel.__init__, ModelBook.republished = lazy_init, republished  # type: ignore[method-assign]
    return plans, built[0], keys[0], audits[0]


@pytest.mark.parametrize("preset", ["trainmaster", "optimus"])
def test_philly_kept_models_plan_as_built_ones(preset: str, shared_data: Path, monkeypatch: pytest.MonkeyPatch
                                              ) -> None:
    """Philly's first jobs: the same plans with and without kept models, every model handed out read as the
    reference's; fewer models built (and for trainmaster fewer `RemainingOrder` keys worked out: in its
    reference sort, which works a key out again at a new model; `kept_order` reads no model on Philly)."""
    monkeypatch.setattr(RemainingOrder, "kept_order", False)
    workload = _philly(shared_data)
    plans, built, keys, _ = _run(workload, preset, True)
    ref_plans, ref_built, ref_keys, _ = _run(workload, preset, False)
    same_plans(plans, ref_plans, least=40)
    assert built < ref_built and keys <= ref_keys
    if preset == "trainmaster":  # (nobody reads a running job's speed: nearly every model kept)
        assert built < ref_built // 2 and keys < ref_keys
    audited, _, _, audits = _run(workload, preset, True, audit=True)
    same_plans(audited, ref_plans, least=40)
    assert audits > 1000


def _keep(on: bool) -> Callable[[Learning], None]:
    def configure(learning: Learning) -> None:
        learning.keep_models = on
    return configure


def test_models_seen_per_snapshot_as_built_ones_on_loss_targets() -> None:
    """Parameter-server jobs with loss targets and two GPU types (`test_once_per_snapshot`'s replay): every
    snapshot's models read as with models built anew."""
    from tests.test_once_per_snapshot import _ps

    fast_models, fast, _ = _replay("trainmaster", True, _ps("1x4:v100+1x4:k80"), _keep(True))
    slow_models, slow, _ = _replay("trainmaster", True, _ps("1x4:v100+1x4:k80"), _keep(False))
    assert fast_models == slow_models
    same_plans(fast, slow, least=40)


def test_a_deferred_weighted_fit_reads_as_the_fit() -> None:
    """`deferred_fit` with weights (a job's own fit, its siblings' rows down-weighted): the same coefficients."""
    rows = [Row(Config(workers=w, ps=p, nodes=n, batch=32.0), y, 1)
            for w, p, n, y in ((1, 1, 1, 0.5), (2, 1, 1, 0.3), (4, 2, 2, 0.2), (8, 2, 2, 0.15), (2, 2, 1, 0.28),
                               (4, 1, 1, 0.19))]
    weights = [1.0, 1.0, 1.0, 0.25, 0.25, 0.25]
    now = fit(Form.PS_SYNC, rows, weights)
    later = deferred_fit(Form.PS_SYNC, rows, weights)
    unweighted = fit(Form.PS_SYNC, rows)
    assert now is not None and later is not None and unweighted is not None and "theta" not in vars(later)
    assert later.theta == now.theta != unweighted.theta and later == now


@pytest.mark.parametrize("preset", ["optimus", "trainmaster"])
def test_deferred_own_fits_plan_as_solved_at_once(preset: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """`ModelBook.defer_own_fits`: parameter-server jobs fit their own speed from their third shape on; the same
    models read and plans as with every own fit solved at once."""
    from tests.test_once_per_snapshot import _ps

    solved = [0]
    solve = SpeedFit.__getattr__

    def counting(self: SpeedFit, name: str) -> tuple[float, ...]:
        solved[0] += name == "theta"
        return solve(self, name)

    monkeypatch.setattr(SpeedFit, "__getattr__", counting)

    def defer(on: bool) -> Callable[[Learning], None]:
        def configure(learning: Learning) -> None:
            learning.book.defer_own_fits = on
        return configure

    fast_models, fast, _ = _replay(preset, True, _ps("2x4"), defer(True))
    deferred = solved[0]
    slow_models, slow, _ = _replay(preset, True, _ps("2x4"), defer(False))
    assert fast_models == slow_models
    same_plans(fast, slow, least=40)
    assert deferred > 0
