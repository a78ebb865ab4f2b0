"""The busy-cluster shortcuts of the preemptive presets plan exactly as trying every job in full.

Tiresias' queues visit only the jobs that can have moved (`TiresiasOrder.incremental`);
`place_in_order(skip_misfits=True)` gives a pending job whose gang already did
not fit (nothing placed or released since) the same wait without a search;
preemption (`VictimRule.shortcuts`) skips claimants with nobody to evict whose
gang does not fit as is, and under rank preemption (`LowerRank.monotone`) any
claimant whose gang could not start even by evicting. Each preset replays a
contended workload with and without them, recording every plan; the two
sequences must be equal, waits in the same order.
"""

from __future__ import annotations

import pytest
from bench.record_plans import QUEUES, queued
from tests.replay_helpers import Recorder

from trainmaster.controller.loop import Controller
from trainmaster.core.cluster import parse_shorthand
from trainmaster.core.queue import QueueSpec
from trainmaster.engines.sim.engine import SimConfig, SimEngine
from trainmaster.policies import cycle as cycle_module
from trainmaster.policies.cycle import Cycle, place_in_order
from trainmaster.policies.preemption import VictimRule
from trainmaster.policies.registry import make_policy
from trainmaster.policies.snapshot import Plan
from trainmaster.policies.tiresias import TiresiasOrder
from trainmaster.workloads.base import Workload
from trainmaster.workloads.loaders import load_workload


def replay(workload: Workload, preset: str, fast: bool, monkeypatch: pytest.MonkeyPatch,
           queues: dict[str, QueueSpec] | None = None) -> list[Plan]:
    cycle = make_policy(preset)
    assert isinstance(cycle, Cycle)
    with monkeypatch.context() as patch:
        if not fast:
            patch.setattr(VictimRule, "shortcuts", False)
            if preset in ("tiresias", "srtf"):
                cycle.place = place_in_order(strict=False, skip_misfits=False)
            ranks = getattr(cycle, "ranks", None) or getattr(cycle.order, "ranks", None)
            if ranks is not None:  # tiresias' queues: every job visited every decision
                assert isinstance(ranks, TiresiasOrder) and ranks.incremental
                ranks.incremental = False
        recorder = Recorder(cycle)
        Controller(SimEngine(parse_shorthand("4x4"), workload, SimConfig()), recorder, queues=queues).run()
    return recorder.plans


def assert_same(fast: list[Plan], slow: list[Plan]) -> None:
    assert len(fast) == len(slow)
    for a, b in zip(fast, slow, strict=True):
        assert a == b
        assert list(a.waits) == list(b.waits)


@pytest.mark.parametrize("preset", ["tiresias", "srtf", "trainmaster"])
def test_preemptive_presets_plan_alike(preset: str, monkeypatch: pytest.MonkeyPatch) -> None:
    workload = load_workload("synthetic:300:60", max_factor=1.0, seed=3, oracle=True)
    fast = replay(workload, preset, True, monkeypatch)
    assert sum(len(p.waits) for p in fast) > 1000  # contended: jobs waited through many decisions
    assert any("preempted" in text for p in fast for text in p.reasons.values())
    assert_same(fast, replay(workload, preset, False, monkeypatch))


def test_with_hard_quotas_plan_alike(monkeypatch: pytest.MonkeyPatch) -> None:
    """Quota-aware rules keep the full path under queue definitions; rank preemption keeps its shortcuts."""
    workload = queued(load_workload("synthetic:200:60", max_factor=1.0, seed=5, oracle=True))
    for preset in ("tiresias", "trainmaster"):
        assert_same(replay(workload, preset, True, monkeypatch, QUEUES),
                    replay(workload, preset, False, monkeypatch, QUEUES))


def test_gang_key_only_for_one_role_gangs_placed_by_free_capacity_alone() -> None:
    spec = load_workload("ps:4:1", seed=1).jobs[0].spec
    assert len(spec.roles) > 1 and spec.anchored
    want = {role: 2 for role in spec.roles}
    assert cycle_module.gang_key(spec, want, False) is None  # several roles
    one = {next(iter(want)): 2}
    assert cycle_module.gang_key(spec, one, True) is None  # anchors on on-demand nodes of a mixed cluster
    assert cycle_module.gang_key(spec, one, False) is not None
    assert cycle_module.gang_key(spec, {next(iter(want)): 3}, False) != cycle_module.gang_key(spec, one, False)
