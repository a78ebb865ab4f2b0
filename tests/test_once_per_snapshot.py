"""A reporting job's model built once per snapshot (`Learning.once_per_snapshot`), not at every report: every
snapshot's models (their keys in order, and what a policy reads of each) and every plan as when each report
builds its job's model at once."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from tests.replay_helpers import same_plans
from tests.test_learning_refresh import Seen, _seen
from tests.test_model_groups import _philly

from trainmaster.controller.learning import Learning
from trainmaster.controller.loop import Controller
from trainmaster.core.cluster import parse_shorthand
from trainmaster.engines.sim.engine import SimConfig, SimEngine
from trainmaster.policies.registry import make_policy
from trainmaster.policies.snapshot import Plan, Snapshot
from trainmaster.workloads.base import Workload
from trainmaster.workloads.ps_truth import ps_workload

Models = list[list[tuple[str, Seen]]]


def _replay(preset: str, once: bool, engine: SimEngine, configure: Callable[[Learning], None] | None = None,
            ) -> tuple[Models, list[Plan], Learning]:
    """Every snapshot's models as a policy reads them (in the snapshot's order), every plan, and the learning;
    `configure`: sets the learning's other switches before the run."""
    policy = make_policy(preset)
    models: Models = []
    plans: list[Plan] = []

    class Recording:
        name, uses_models, interval, reads_few_jobs = policy.name, True, policy.interval, policy.reads_few_jobs

        def decide(self, snap: Snapshot) -> Plan:
            models.append([(jid, _seen(m)) for jid, m in snap.models.items()])
            plans.append(policy.decide(snap))
            return plans[-1]

    controller = Controller(engine, Recording())  # type: ignore[arg-type]
    learning = next(s for s in controller.report_sinks if isinstance(s, Learning))
    learning.once_per_snapshot = once
    if configure is not None:
        configure(learning)
    controller.run()
    assert not learning._unpublished and not controller.models  # (ended jobs leave nothing to build)
    return models, plans, learning


def _same(preset: str, make: Callable[[], SimEngine]) -> None:
    """Replay with the switch on and off: the same models and plans, and the fast path ran."""
    fast_models, fast, learning = _replay(preset, True, make())
    slow_models, slow, reference = _replay(preset, False, make())
    assert fast_models == slow_models
    same_plans(fast, slow, least=40)
    assert reference.spared == reference.early == 0
    # The fast path ran: most reports' models were never built (the job reported again first).
    assert learning.spared > len(fast)
    # Some types' models were built between snapshots: a report was about to move what they read.
    assert learning.early > 0


def _ps(cluster: str) -> SimEngine:
    """24 parameter-server jobs of a few types, reports every 60 s: several per job between decisions, loss
    targets (curves refit as points grow), own fits from a job's third shape on."""
    return SimEngine(parse_shorthand(cluster), ps_workload(24, rate_per_hour=40, seed=5),
                     SimConfig(report_interval=60, speed_noise=0.02, loss_noise=0.01, seed=2))


@pytest.mark.parametrize(("preset", "cluster"), [("optimus", "2x4"), ("trainmaster", "1x4:v100+1x4:k80")])
def test_models_built_once_per_snapshot_plan_as_built_per_report(preset: str, cluster: str) -> None:
    """On two GPU types every report moves its type's relative GPU speeds too."""
    _same(preset, lambda: _ps(cluster))


def test_philly_models_built_once_per_snapshot_plan_as_built_per_report(shared_data: Path) -> None:
    """Philly's one type without targets: running jobs read their type's prior, which learns between snapshots
    (reports every 60 s: several per job between decisions)."""
    workload: Workload = _philly(shared_data)
    _same("optimus", lambda: SimEngine(parse_shorthand("4x8"), workload, SimConfig(report_interval=60, seed=2)))
