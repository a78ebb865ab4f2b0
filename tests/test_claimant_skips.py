"""Preemption's busy-line steps plan exactly as serving every claimant in full.

`QueueRules.idle`: without queue definitions, when no (kind, priority) among the claimants may evict anybody,
all of them stay blocked at once. `VictimRule.exhausted`: once nobody has anybody to evict from a claimant on
(rank order), a claimant whose gang did not fit as is with the same free total is skipped. Victims to migrate
whose gang found no room, nothing placed since, are not searched for again. All of them sit behind
`VictimRule.shortcuts`; each preset decides the decision bench's busy snapshot, and replays a contended
workload, with and without them: every plan equal, waits in the same order, and the steps seen to fire.
"""

from __future__ import annotations

import pytest
from bench.decision_time import snapshot
from tests.replay_helpers import Recorder
from tests.test_busy_shortcuts import assert_same

from trainmaster.controller.loop import Controller
from trainmaster.core.cluster import parse_shorthand
from trainmaster.core.resources import Resources
from trainmaster.engines.sim.engine import SimConfig, SimEngine
from trainmaster.policies.cycle import Cycle
from trainmaster.policies.las import SameClassLowerRank
from trainmaster.policies.preemption import LowerRank, QueueRules, VictimRule
from trainmaster.policies.registry import make_policy
from trainmaster.policies.snapshot import Plan
from trainmaster.workloads.loaders import load_workload

PRESETS = ["tiresias", "srtf", "edl", "trainmaster"]


def _counting(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """How often each step's test answered yes (`idle`, `exhausted`); and `exhausted`'s promise checked: once
    it said yes, `room` is zero for every later claimant of that pass."""
    seen = {"idle": 0, "exhausted": 0}
    idle, lower, same = QueueRules.idle, LowerRank.exhausted, SameClassLowerRank.exhausted
    done: list[VictimRule] = []  # the rules (passes) that said so

    def checked(original: object) -> object:
        def room(self: VictimRule, claimant: object) -> Resources | None:
            found: Resources | None = original(self, claimant)  # type: ignore[operator]
            assert not any(rule is self for rule in done) or (found is not None and found.is_zero())
            return found
        return room

    monkeypatch.setattr(LowerRank, "room", checked(LowerRank.room))
    monkeypatch.setattr(SameClassLowerRank, "room", checked(SameClassLowerRank.room))

    def counted_idle(self: QueueRules, claimants: list[object]) -> bool:
        found = idle(self, claimants)  # type: ignore[arg-type]
        seen["idle"] += found
        return found

    def counted(original: object) -> object:
        def exhausted(self: VictimRule, claimant: object) -> bool:
            found: bool = original(self, claimant)  # type: ignore[operator]
            seen["exhausted"] += found
            if found:
                done.append(self)
            return found
        return exhausted

    monkeypatch.setattr(QueueRules, "idle", counted_idle)
    monkeypatch.setattr(LowerRank, "exhausted", counted(lower))
    monkeypatch.setattr(SameClassLowerRank, "exhausted", counted(same))
    return seen


def _decide_twice(preset: str, fast: bool, monkeypatch: pytest.MonkeyPatch) -> list[Plan]:
    snap = snapshot(busy=True, pending=4000)  # (more than the victims make room for)
    cycle = make_policy(preset)
    with monkeypatch.context() as patch:
        if not fast:
            patch.setattr(VictimRule, "shortcuts", False)
        return [cycle.decide(snap), cycle.decide(snap)]


@pytest.mark.parametrize("preset", PRESETS)
def test_busy_decision_plans_alike(preset: str, monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _counting(monkeypatch)
    fast = _decide_twice(preset, True, monkeypatch)
    if preset in ("edl", "trainmaster"):
        assert seen["idle"] == 2  # nobody may evict across priorities: the queue rules' pass is one step
    if preset == "trainmaster":
        assert seen["exhausted"] == 2  # LAS preemption ran out of victims long before the line did
    assert any("preempted" in text for text in fast[0].reasons.values()) == (preset != "edl")
    assert_same(fast, _decide_twice(preset, False, monkeypatch))


def _replay(preset: str, fast: bool, monkeypatch: pytest.MonkeyPatch) -> list[Plan]:
    workload = load_workload("synthetic:300:60", max_factor=1.0, seed=3, oracle=True)
    cycle = make_policy(preset)
    assert isinstance(cycle, Cycle)
    with monkeypatch.context() as patch:
        if not fast:
            patch.setattr(VictimRule, "shortcuts", False)
        recorder = Recorder(cycle)
        Controller(SimEngine(parse_shorthand("4x4"), workload, SimConfig()), recorder).run()
    return recorder.plans


@pytest.mark.parametrize("preset", ["srtf", "edl", "trainmaster"])
def test_contended_replay_plans_alike(preset: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """(tiresias and trainmaster replay this workload in `test_busy_shortcuts`, with these steps on.)"""
    seen = _counting(monkeypatch)
    fast = _replay(preset, True, monkeypatch)
    assert seen["idle" if preset == "edl" else "exhausted"] > 10
    assert_same(fast, _replay(preset, False, monkeypatch))
