"""`AdaptiveCycle.scan_batches`: no batch chosen while no planned job adapts its batch, as asking every one.

Pollux workload 1 (every job adapts its batch) with every other job's batch fixed, so some decisions plan
adaptive jobs and some plan none; replayed with and without the scan, every plan (batches and in-place
switches included) must be equal, and the scan must have spared some decisions.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from tests.replay_helpers import on_and_off, spy

from trainmaster.cli.simulate import config_for, sim_config, simulate_one
from trainmaster.core.cluster import parse_shorthand
from trainmaster.policies import trainmaster as preset_module
from trainmaster.policies.snapshot import Plan
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

    def plans() -> list[Plan]:
        with monkeypatch.context() as patch:
            decided = spy(patch, AdaptiveCycle, "decide")
            result = simulate_one(wl, parse_shorthand("16x4"), "trainmaster",
                                  config_for("trainmaster", sim_config("pollux")))
        assert result.summary.finished == len(wl.jobs)
        return decided

    fast, slow = on_and_off(monkeypatch, plans, (AdaptiveCycle, "scan_batches"),
                            spies={"chosen": (preset_module, "choose_batches")})
    assert any(p.batch for p in fast.plans) and any(p.rebatch for p in fast.plans)  # adaptive jobs planned, switched
    assert len(slow.calls["chosen"]) == len(slow.plans)
    assert 0 < len(fast.calls["chosen"]) < len(slow.calls["chosen"])  # spared at some decisions
