"""Rank preemption's (tiresias, srtf) session-11 fast paths plan exactly as their references.

`LowerRank.bisect_room` finds the holders ranked ahead of a claimant by bisection instead of a step per
holder. A contended workload (a long line, preemption, migration) replays with each switch on and off;
every plan, the order of its allocations and its waits (in order) must be equal, and the fast path must
have been taken.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from tests.replay_helpers import Recorder, same_plans

from trainmaster.controller.loop import Controller
from trainmaster.core.cluster import parse_shorthand
from trainmaster.engines.sim.engine import SimConfig, SimEngine
from trainmaster.policies import srtf, tiresias
from trainmaster.policies.cycle import Cycle
from trainmaster.policies.preemption import LowerRank
from trainmaster.policies.snapshot import Plan
from trainmaster.workloads.loaders import load_workload

MAKES = [tiresias.make, srtf.make]
IDS = ["tiresias", "srtf"]


def replay(make: Callable[[], Cycle], switch: str, on: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[list[Plan], int]:
    """Every plan, and how many claimants' rooms were asked past some holder ranked ahead of them."""
    passed = [0]
    room = LowerRank.room

    def counted_room(self: LowerRank, claimant):  # type: ignore[no-untyped-def]
        before = self.cursor
        out = room(self, claimant)
        passed[0] += self.cursor > before
        return out

    with monkeypatch.context() as patch:
        patch.setattr(LowerRank, switch, on)
        patch.setattr(LowerRank, "room", counted_room)
        recorder = Recorder(make())
        workload = load_workload("synthetic:300:60", max_factor=1.0, seed=3, oracle=True)
        Controller(SimEngine(parse_shorthand("4x4"), workload, SimConfig()), recorder).run()
    return recorder.plans, passed[0]


@pytest.mark.parametrize("make", MAKES, ids=IDS)
def test_bisect_room_plans_alike(make: Callable[[], Cycle], monkeypatch: pytest.MonkeyPatch) -> None:
    fast, fast_passed = replay(make, "bisect_room", True, monkeypatch)
    slow, slow_passed = replay(make, "bisect_room", False, monkeypatch)
    same_plans(fast, slow, least=100)  # (`Plan` equality covers `wake_after`)
    assert fast_passed == slow_passed > 0  # claimants ranked after some holders: the bisection moved
