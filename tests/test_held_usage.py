"""A decision's queue book from the usage kept across decisions plans exactly as one built from every allocation.

`HeldUsage` brings a base book in step with the workspace's allocations (only the jobs whose allocation or
spec changed) and hands each decision a copy. The queue-aware presets replay contended workloads with and
without it, with and without queue definitions (quotas, borrowing, reclaim), recording every plan; the
two sequences must be equal, waits in the same order.
"""

from __future__ import annotations

import pytest
from bench.record_plans import QUEUES, queued
from tests.replay_helpers import Recorder

from trainmaster.controller.loop import Controller
from trainmaster.core.cluster import parse_shorthand
from trainmaster.core.queue import QueueSpec
from trainmaster.engines.sim.engine import SimConfig, SimEngine
from trainmaster.policies.cycle import Cycle
from trainmaster.policies.queuebook import HeldUsage, QueueBook
from trainmaster.policies.registry import make_policy
from trainmaster.policies.snapshot import Plan
from trainmaster.workloads.base import Workload
from trainmaster.workloads.loaders import load_workload


def replay(workload: Workload, preset: str, kept: bool, monkeypatch: pytest.MonkeyPatch,
           queues: dict[str, QueueSpec] | None = None) -> tuple[list[Plan], int]:
    """Every plan, and how many books were built from every allocation."""
    cycle = make_policy(preset)
    assert isinstance(cycle, Cycle)
    built = [0]
    fresh = QueueBook.__init__

    def counted(self: QueueBook, *args: object, **kwargs: object) -> None:
        built[0] += 1
        fresh(self, *args, **kwargs)  # type: ignore[arg-type]

    with monkeypatch.context() as patch:
        patch.setattr(HeldUsage, "shortcut", kept)
        patch.setattr(QueueBook, "__init__", counted)
        recorder = Recorder(cycle)
        Controller(SimEngine(parse_shorthand("4x4"), workload, SimConfig()), recorder, queues=queues).run()
    return recorder.plans, built[0]


def assert_same(fast: list[Plan], slow: list[Plan]) -> None:
    assert len(fast) == len(slow) > 50
    for a, b in zip(fast, slow, strict=True):
        assert a == b
        assert list(a.waits) == list(b.waits)


@pytest.mark.parametrize("preset", ["trainmaster", "edl"])
def test_queue_aware_presets_plan_alike(preset: str, monkeypatch: pytest.MonkeyPatch) -> None:
    workload = load_workload("synthetic:300:60", max_factor=1.0, seed=3, oracle=True)
    fast, fast_built = replay(workload, preset, True, monkeypatch)
    slow, slow_built = replay(workload, preset, False, monkeypatch)
    # Without queue definitions nothing reads a book (no quota, no share; queue names from
    # `Workspace.queue_of`): none is built either way (the kept usage serves in the test below).
    assert fast_built == slow_built == 0
    assert preset != "trainmaster" or any("preempted" in text for p in fast for text in p.reasons.values())
    assert_same(fast, slow)


def test_with_queue_definitions_plan_alike(monkeypatch: pytest.MonkeyPatch) -> None:
    workload = queued(load_workload("synthetic:200:60", max_factor=1.0, seed=5, oracle=True))
    fast, fast_built = replay(workload, "trainmaster", True, monkeypatch, QUEUES)
    slow, slow_built = replay(workload, "trainmaster", False, monkeypatch, QUEUES)
    assert fast_built < slow_built / 10
    assert_same(fast, slow)
