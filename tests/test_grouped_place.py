"""The grouped place loop (`place_in_order(grouped=True)`) plans exactly as a Python step per job.

Between two placements it searches only the first waiting job of each gang key (and the unkeyed
ones) and gives the rest of each failed key its wait in one step, reading each job's step off a
memo kept across decisions (`cycle._Kept`, valid while the view, sizes and held allocation are the
same). Each case replays a contended workload with it and with the per-job loop (`grouped=False`),
and compares every plan, waits in order, and the gang keys the place phase leaves for preemption.
"""

from __future__ import annotations

import pytest
from bench.record_plans import QUEUES, queued
from tests.replay_helpers import Recorder

from trainmaster.controller.loop import Controller
from trainmaster.core.cluster import parse_shorthand
from trainmaster.core.queue import QueueSpec
from trainmaster.engines.sim.engine import SimConfig, SimEngine
from trainmaster.policies import workspace
from trainmaster.policies.cycle import Cycle, place_in_order
from trainmaster.policies.registry import make_policy
from trainmaster.policies.snapshot import Plan
from trainmaster.workloads.base import Workload
from trainmaster.workloads.loaders import load_workload


def replay(workload: Workload, preset: str, grouped: bool, monkeypatch: pytest.MonkeyPatch, cluster: str = "4x4",
           queues: dict[str, QueueSpec] | None = None) -> tuple[list[Plan], int, list[dict[str, object]]]:
    """The plans, the number of searches (`Workspace.place` calls) and each decision's gang keys."""
    cycle = make_policy(preset)
    assert isinstance(cycle, Cycle)
    cycle.place = place_in_order(strict=False, grouped=grouped)
    searches = 0
    gangs: list[dict[str, object]] = []
    real_place, real_plan = workspace.Workspace.place, workspace.Workspace.plan

    def place(self: workspace.Workspace, job: object, counts: object) -> object:
        nonlocal searches
        searches += 1
        return real_place(self, job, counts)  # type: ignore[arg-type]

    def plan(self: workspace.Workspace) -> Plan:
        gangs.append({jid: (dict(want), key) for jid, (want, key) in self.gangs.items()})
        return real_plan(self)

    with monkeypatch.context() as patch:
        patch.setattr(workspace.Workspace, "place", place)
        patch.setattr(workspace.Workspace, "plan", plan)
        recorder = Recorder(cycle)
        Controller(SimEngine(parse_shorthand(cluster), workload, SimConfig()), recorder, queues=queues).run()
    return recorder.plans, searches, gangs


def assert_same(preset: str, workload: Workload, monkeypatch: pytest.MonkeyPatch, cluster: str = "4x4",
                queues: dict[str, QueueSpec] | None = None) -> tuple[int, int]:
    fast, fast_searches, fast_gangs = replay(workload, preset, True, monkeypatch, cluster, queues)
    slow, slow_searches, slow_gangs = replay(workload, preset, False, monkeypatch, cluster, queues)
    assert len(fast) == len(slow)
    for a, b in zip(fast, slow, strict=True):
        assert a == b
        assert list(a.waits) == list(b.waits)
    assert fast_gangs == slow_gangs
    return fast_searches, slow_searches


@pytest.mark.parametrize("preset", ["tiresias", "srtf"])
def test_grouped_place_plans_alike(preset: str, monkeypatch: pytest.MonkeyPatch) -> None:
    workload = load_workload("synthetic:300:60", max_factor=1.0, seed=3, oracle=True)
    fast, slow = assert_same(preset, workload, monkeypatch)
    assert fast <= slow  # the same searches at most (the per-job loop skips failed keys too)


def test_grouped_place_on_a_mixed_cluster_with_several_roles(monkeypatch: pytest.MonkeyPatch) -> None:
    """PS/worker gangs have no key (searched in turn); anchored gangs on transient nodes neither."""
    workload = load_workload("ps:60:30", seed=2)
    assert any(len(j.spec.roles) > 1 for j in workload.jobs)
    assert_same("tiresias", workload, monkeypatch, cluster="4x4")


def test_grouped_place_with_quotas(monkeypatch: pytest.MonkeyPatch) -> None:
    workload = queued(load_workload("synthetic:200:60", max_factor=1.0, seed=5, oracle=True))
    assert_same("tiresias", workload, monkeypatch, queues=QUEUES)
