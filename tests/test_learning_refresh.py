"""Learning republishes waiting jobs' models once before the next snapshot, not at every report of their type:
the same models in every snapshot, and the same plans, as republishing them at once."""

from __future__ import annotations

import pytest

from trainmaster.controller.learning import Learning
from trainmaster.controller.loop import Controller
from trainmaster.core.cluster import parse_shorthand
from trainmaster.core.job import JobSpec
from trainmaster.engines.sim.engine import SimConfig, SimEngine
from trainmaster.models.book import JobModel
from trainmaster.policies.registry import make_policy
from trainmaster.policies.snapshot import Plan, Snapshot
from trainmaster.workloads.ps_truth import ps_workload

Seen = tuple[object, ...]


def _seen(model: JobModel) -> Seen:
    """What a policy can read of a model (predictors compare by their predictions)."""
    speeds = tuple(model.steps_per_s(w, p, n) for w, p, n in ((1, 1, 1), (2, 1, 1), (4, 2, 2), (8, 4, 2)))
    return (model.basis, model.step, model.remaining, model.configs, model.batch, speeds, dict(model.type_speed))


def _replay(preset: str, defer: bool) -> tuple[list[dict[str, Seen]], list[Plan], int]:
    """Every snapshot's models and every plan of one run, and how many models the book built."""
    engine = SimEngine(parse_shorthand("2x4"), ps_workload(24, rate_per_hour=40, seed=5),
                       SimConfig(report_interval=120, speed_noise=0.02, loss_noise=0.01, seed=2))
    policy = make_policy(preset)
    models: list[dict[str, Seen]] = []
    plans: list[Plan] = []

    class Recording:
        name, uses_models, interval = policy.name, True, policy.interval

        def decide(self, snap: Snapshot) -> Plan:
            models.append({jid: _seen(m) for jid, m in snap.models.items()})
            plans.append(policy.decide(snap))
            return plans[-1]

    controller = Controller(engine, Recording())  # type: ignore[arg-type]
    learning = next(s for s in controller.report_sinks if isinstance(s, Learning))
    learning.defer = defer
    book, calls = learning.book, [0]
    fitted = book.model

    def counted(job_id: str, spec: JobSpec) -> JobModel:
        calls[0] += 1
        return fitted(job_id, spec)

    book.model = counted  # type: ignore[method-assign]
    controller.run()
    assert controller.summary().finished == 24
    return models, plans, calls[0]


@pytest.mark.parametrize("preset", ["optimus"])
def test_deferred_refresh_publishes_the_same_models_and_plans(preset: str) -> None:
    lazy_models, lazy_plans, lazy_fits = _replay(preset, defer=True)
    eager_models, eager_plans, eager_fits = _replay(preset, defer=False)
    assert lazy_fits < eager_fits  # the deferred path did defer: fewer models built
    assert len(lazy_models) == len(eager_models) > 20
    for lazy, eager in zip(lazy_models, eager_models, strict=True):
        assert lazy == eager
    for lazy_plan, eager_plan in zip(lazy_plans, eager_plans, strict=True):
        assert lazy_plan.allocations == eager_plan.allocations and lazy_plan.reasons == eager_plan.reasons
    assert any(m[0] == "type prior" for snap in lazy_models for m in snap.values())  # siblings' priors were used
