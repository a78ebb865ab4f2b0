"""`AdaptiveCycle.scan_batches`: no batch chosen while no planned job adapts its batch, as asking every one.

Pollux workload 1 (every job adapts its batch) with every other job's batch fixed, so some decisions plan
adaptive jobs and some plan none; replayed with and without the scan, every plan (batches and in-place
switches included) must be equal, and the scan must have spared some decisions.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from tests.replay_helpers import same_plans

from trainmaster.cli.simulate import config_for, sim_config, simulate_one
from trainmaster.core.cluster import parse_shorthand
from trainmaster.policies import goodput
from trainmaster.policies import trainmaster as preset_module
from trainmaster.policies.snapshot import Plan, Snapshot
from trainmaster.policies.trainmaster import AdaptiveCycle
from trainmaster.workloads.base import Workload
from trainmaster.workloads.pollux import load_pollux


def half_adaptive(shared_data: Path) -> Workload:
    wl = load_pollux(shared_data / "pollux" / "workloads" / "workload-1.csv", shared_data / "pollux" / "profiles",
                     max_factor=2.0, fidelity="pollux")
    return replace(wl, jobs=tuple(replace(j, spec=replace(j.spec, adaptive_batch=None)) if i % 2 else j
                                  for i, j in enumerate(wl.jobs)))


def test_batches_skipped_without_adaptive_jobs_plan_as_asking_every_one(
        shared_data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wl = half_adaptive(shared_data)
    plans: list[Plan] = []
    chosen = [0]
    decide, choose = AdaptiveCycle.decide, goodput.choose_batches

    def recorded(self: AdaptiveCycle, snap: Snapshot) -> Plan:
        plans.append(decide(self, snap))
        return plans[-1]

    def counted(snap: Snapshot, plan: Plan) -> dict[str, int]:
        chosen[0] += 1
        return choose(snap, plan)

    runs = {}
    for scan in (True, False):
        with monkeypatch.context() as patch:
            patch.setattr(AdaptiveCycle, "decide", recorded)
            patch.setattr(AdaptiveCycle, "scan_batches", scan)
            patch.setattr(preset_module, "choose_batches", counted)
            plans.clear()
            chosen[0] = 0
            result = simulate_one(wl, parse_shorthand("16x4"), "trainmaster",
                                  config_for("trainmaster", sim_config("pollux")))
            assert result.summary.finished == len(wl.jobs)
            runs[scan] = list(plans), chosen[0]
    (fast, fast_chosen), (slow, slow_chosen) = runs[True], runs[False]
    same_plans(fast, slow)
    assert any(p.batch for p in fast) and any(p.rebatch for p in fast)  # adaptive jobs planned, switched
    assert slow_chosen == len(slow) and 0 < fast_chosen < slow_chosen  # spared at some decisions
