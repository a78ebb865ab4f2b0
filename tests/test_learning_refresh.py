"""Learning republishes waiting jobs' models once before the next snapshot, not at every report of their type:
the same models in every snapshot, and the same plans, as republishing them at once."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from trainmaster.controller import learning as learning_module
from trainmaster.controller.learning import Learning
from trainmaster.controller.loop import Controller
from trainmaster.core.allocation import Allocation, Placement
from trainmaster.core.cluster import parse_shorthand
from trainmaster.core.events import Report
from trainmaster.core.job import JobSpec, Role, Target, simple_job
from trainmaster.engines.sim.engine import SimConfig, SimEngine
from trainmaster.models.book import JobLearner, JobModel, LazyJobModel, ModelBook
from trainmaster.models.speed import N_PARAMS, SpeedPredictor
from trainmaster.policies.registry import make_policy
from trainmaster.policies.snapshot import Plan, Snapshot
from trainmaster.workloads.ps_truth import ps_workload

Seen = tuple[object, ...]


def _seen(model: JobModel) -> Seen:
    """What a policy can read of a model (predictors compare by their predictions)."""
    speeds = tuple(model.steps_per_s(w, p, n) for w, p, n in ((1, 1, 1), (2, 1, 1), (4, 2, 2), (8, 4, 2)))
    return (model.basis, model.step, model.remaining, model.configs, model.batch, speeds, dict(model.type_speed),
            model.curve, model.max_workers, model.form)


def same_models_and_plans(fast_models: list[Any], slow_models: list[Any], fast_plans: list[Plan],
                          slow_plans: list[Plan]) -> None:
    """Two replays (a shortcut and its reference) saw the same models at every snapshot (more than 20) and
    planned the same allocations with the same reasons."""
    assert len(fast_models) == len(slow_models) > 20
    for fast, slow in zip(fast_models, slow_models, strict=True):
        assert fast == slow
    for fast_plan, slow_plan in zip(fast_plans, slow_plans, strict=True):
        assert fast_plan.allocations == slow_plan.allocations and fast_plan.reasons == slow_plan.reasons


def _replay(preset: str, defer: bool, skip: bool = True, lazy: bool = True, one_fit: bool = True,
            shared: bool = True, keep_gpu_type: bool = True, cluster: str = "2x4", lose: str | None = None,
            ) -> tuple[list[dict[str, Seen]], list[Plan], int, int]:
    """Every snapshot's models and every plan of one run, how many models the book built and speeds it gave."""
    engine = SimEngine(parse_shorthand(cluster), ps_workload(24, rate_per_hour=40, seed=5),
                       SimConfig(report_interval=120, speed_noise=0.02, loss_noise=0.01, seed=2))
    if lose is not None:
        engine.revoke(lose, 4000.0)
    policy = make_policy(preset)
    models: list[dict[str, Seen]] = []
    lazy_seen = [0]
    plans: list[Plan] = []

    class Recording:
        name, uses_models, interval, reads_few_jobs = policy.name, True, policy.interval, policy.reads_few_jobs

        def decide(self, snap: Snapshot) -> Plan:
            models.append({jid: _seen(m) for jid, m in snap.models.items()})
            lazy_seen[0] += sum(isinstance(m, LazyJobModel) for m in snap.models.values())
            plans.append(policy.decide(snap))
            return plans[-1]

    controller = Controller(engine, Recording())  # type: ignore[arg-type]
    learning = next(s for s in controller.report_sinks if isinstance(s, Learning))
    learning.defer = defer
    learning.skip_same_prior = skip
    learning.lazy = lazy
    learning.one_fit = one_fit
    learning.shared = shared
    learning.keep_gpu_type = keep_gpu_type
    book, calls = learning.book, [0, 0]
    fitted, speed = book.model, book.speed

    def counted(job_id: str, spec: JobSpec, speed_basis: tuple[SpeedPredictor | None, str] | None = None,
                type_speed: Mapping[str, float] | None = None) -> JobModel:
        calls[0] += 1
        return fitted(job_id, spec, speed_basis, type_speed)

    def counted_speed(learner: JobLearner) -> tuple[SpeedPredictor | None, str]:
        calls[1] += 1
        return speed(learner)

    book.model = counted  # type: ignore[method-assign]
    book.speed = counted_speed  # type: ignore[method-assign]
    controller.run()
    assert controller.summary().finished == 24
    assert (lazy_seen[0] > 0) == lazy  # the lazy models reached the policy, or none did
    return models, plans, calls[0], calls[1]


@pytest.mark.parametrize("preset", ["optimus"])
def test_deferred_refresh_publishes_the_same_models_and_plans(preset: str) -> None:
    lazy_models, lazy_plans, lazy_fits, _ = _replay(preset, defer=True)
    eager_models, eager_plans, eager_fits, _ = _replay(preset, defer=False)
    assert lazy_fits < eager_fits  # the deferred path did defer: fewer models built
    same_models_and_plans(lazy_models, eager_models, lazy_plans, eager_plans)
    assert any(m[0] == "type prior" for snap in lazy_models for m in snap.values())  # siblings' priors were used


def test_refresh_skips_types_whose_prior_fit_is_unchanged() -> None:
    """Skipping a type whose prior fit is the same object as at its last refresh: the same models and plans."""
    # (each waiting job's speed asked of the book, `one_fit=False`: the asks count the jobs checked)
    fast_models, fast_plans, fast_fits, fast_speeds = _replay("optimus", defer=True, skip=True, one_fit=False)
    slow_models, slow_plans, slow_fits, slow_speeds = _replay("optimus", defer=True, skip=False, one_fit=False)
    assert fast_fits == slow_fits  # (a skipped type republishes nothing in the reference either)
    assert fast_speeds < slow_speeds  # some refreshes were skipped
    same_models_and_plans(fast_models, slow_models, fast_plans, slow_plans)


@pytest.mark.parametrize("preset", ["optimus", "trainmaster"])
def test_lazy_models_read_as_the_eager_ones(preset: str) -> None:
    """The reporting job's model computed on first read: every snapshot's models and every plan as built at once."""
    lazy_models, lazy_plans, _, _ = _replay(preset, defer=True, lazy=True)
    eager_models, eager_plans, _, _ = _replay(preset, defer=True, lazy=False)
    same_models_and_plans(lazy_models, eager_models, lazy_plans, eager_plans)
    bases = {m[0] for snap in lazy_models for m in snap.values()}
    assert {"type prior", "own fit"} <= bases  # both the captured prior and the eager own fit were read


def test_refresh_reads_each_types_fit_once() -> None:
    """Waiting jobs' speeds from their type's fit, looked up once per refresh: the same models and plans."""
    # (each waiting job's model built by the book, `shared=False`: the builds count the jobs republished)
    fast_models, fast_plans, fast_fits, fast_speeds = _replay("optimus", defer=True, one_fit=True, shared=False)
    slow_models, slow_plans, slow_fits, slow_speeds = _replay("optimus", defer=True, one_fit=False)
    assert fast_fits == slow_fits and fast_speeds < slow_speeds  # the same republishing, fewer speeds asked
    same_models_and_plans(fast_models, slow_models, fast_plans, slow_plans)


@pytest.mark.parametrize("preset", ["optimus", "trainmaster"])
def test_waiting_jobs_models_copied_from_one_per_kind(preset: str) -> None:
    """Waiting jobs without reports get copies of one model per form, batch and target (`Learning.shared`):
    every snapshot's models and every plan as when each is built afresh, and fewer built."""
    fast_models, fast_plans, fast_fits, _ = _replay(preset, defer=True, shared=True)
    slow_models, slow_plans, slow_fits, _ = _replay(preset, defer=True, shared=False)
    assert fast_fits <= slow_fits and (fast_fits < slow_fits or preset != "optimus")  # copies were handed out
    same_models_and_plans(fast_models, slow_models, fast_plans, slow_plans)
    assert any(m[0] == "type prior" and m[2] is not None for snap in fast_models for m in snap.values())


def test_unreported_model_copies_read_as_built_ones() -> None:
    """A copy carries its own id and every field of the model the book builds for that job; reported jobs refused."""
    book = ModelBook()
    sibling = simple_job("s", 2, min_gpus=1, max_gpus=8, job_type="t", labels=(("batch_size", "64"),))
    for i, (w, rate) in enumerate(((1, 10.0), (2, 18.0), (3, 25.0), (4, 30.0), (5, 34.0), (6, 37.0), (8, 40.0))):
        alloc = Allocation.of(Placement(Role.WORKER, f"n{k}") for k in range(w))
        book.observe("s", sibling, Report(time=float(i), job_id="s", step=10 * i, steps_per_s=rate, allocation=alloc))
    made: dict[tuple[object, ...], JobModel] = {}
    kinds = [("a", 1000), ("b", 1000), ("c", 500), ("d", None)]
    for name, steps in kinds:
        spec = simple_job(name, 2, min_gpus=1, max_gpus=8, job_type="t", labels=(("batch_size", "64"),),
                          target=Target(steps=steps))
        learner = book.learner(name, spec)
        speed = book.unreported_speed(learner, book.priors.fitted("t", learner.form, N_PARAMS[learner.form]))
        assert speed[1] == "type prior"
        copy = book.unreported_model(learner, spec, speed, book.type_speed(learner), made)
        built = book.model(name, spec)
        assert copy == built and copy.job_id == name
    assert len(made) == 3  # a and b share one; c (another target) and d (none) have their own
    with pytest.raises(ValueError, match="has reports"):
        book.unreported_model(book.learners["s"], sibling, speed, book.type_speed(book.learners["s"]), made)


@pytest.mark.parametrize("preset", ["optimus", "trainmaster"])
def test_gpu_type_kept_per_allocation(preset: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each report's GPU type asked once per allocation, cluster and spec (`Learning.keep_gpu_type`): on two
    GPU types with a node lost, every snapshot's models and every plan as when asked at every report."""
    asked = [0]
    ask = learning_module.one_gpu_type

    def counted(*args: Any) -> str | None:
        asked[0] += 1
        return ask(*args)

    monkeypatch.setattr(learning_module, "one_gpu_type", counted)
    runs = {}
    for keep in (True, False):
        asked[0] = 0
        runs[keep] = (*_replay(preset, defer=True, keep_gpu_type=keep, cluster="1x4:v100+1x4:k80", lose="n1-0"),
                      asked[0])
    fast_models, fast_plans, _, _, fast_asked = runs[True]
    slow_models, slow_plans, _, _, slow_asked = runs[False]
    assert fast_asked < slow_asked / 2  # asked once per allocation, not per report
    same_models_and_plans(fast_models, slow_models, fast_plans, slow_plans)
    assert any(len(m[6]) > 1 for snap in fast_models for m in snap.values())  # GPU types were told apart
