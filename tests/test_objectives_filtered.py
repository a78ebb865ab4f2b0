"""`apply_objectives` picks out the jobs with a budget or deadline in C-level passes (`objectives.FILTERED`), exactly.

The reference takes a Python step per admitted job to find them; a contended optimus replay (PS jobs with loss
targets, so models predict and jobs resize) where every third job sets a budget and every fourth a deadline must
plan alike with and without the filter: every plan, the order of its allocations, its waits in order.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from tests.replay_helpers import Recorder, same_plans

from builders import node
from trainmaster.cli.simulate import LEARNING_REPORT_INTERVAL
from trainmaster.controller.loop import Controller
from trainmaster.core.cluster import Cluster
from trainmaster.engines.sim.engine import SimConfig, SimEngine
from trainmaster.policies import objectives
from trainmaster.policies.optimus import Optimus
from trainmaster.policies.snapshot import Plan
from trainmaster.workloads.base import Workload
from trainmaster.workloads.ps_truth import ps_workload


def workload() -> Workload:
    line = ps_workload(60, rate_per_hour=60, seed=3)
    return replace(line, jobs=tuple(
        replace(j, spec=replace(j.spec, budget=0.2 + k % 5 if k % 3 == 0 else None,
                                deadline=600.0 * (1 + k % 7) if k % 4 == 0 else None))
        for k, j in enumerate(line.jobs)))


def replay(filtered: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[list[Plan], int]:
    """Every plan, and how many sizes the objectives changed from the preset's."""
    changed = 0
    apply = objectives.apply_objectives

    def counted(snap, jobs, sizes, ws):  # type: ignore[no-untyped-def]
        nonlocal changed
        before = dict(sizes)
        after = apply(snap, jobs, sizes, ws)
        changed += sum(after[j] != before[j] for j in before)
        return after

    with monkeypatch.context() as patch:
        patch.setattr(objectives, "FILTERED", filtered)
        patch.setattr("trainmaster.policies.cycle.apply_objectives", counted)
        recorder = Recorder(Optimus().cycle)
        recorder.uses_models = True  # (optimus': the controller fits models online from reports)
        cluster = Cluster(tuple(node(f"n{i}", 4, price_per_hour=14.4 * (1 + i)) for i in range(3)))  # (priced)
        engine = SimEngine(cluster, workload(), SimConfig(report_interval=LEARNING_REPORT_INTERVAL))
        Controller(engine, recorder).run()
    return recorder.plans, changed


def test_filtered_objectives_plan_as_one_by_one(monkeypatch: pytest.MonkeyPatch) -> None:
    fast, moved = replay(True, monkeypatch)
    slow, _ = replay(False, monkeypatch)
    same_plans(fast, slow)
    assert moved > 10  # the objectives resized jobs: the filter found them
