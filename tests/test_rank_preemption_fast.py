"""Rank preemption's (tiresias, srtf) session-11 fast paths plan exactly as their references.

`LowerRank.bisect_room` finds the holders ranked ahead of a claimant by bisection instead of a step per
holder; `LowerRank.ranked_holders` takes the holders in the rank's own order instead of sorting them;
`Tiresias.first_misfit` gives up the pending pass when the first pending job alone does not fit, without
summing every pending job's minimum. A contended workload (a long line, preemption, migration) replays
with each switch on and off; every plan, the order of its allocations and its waits (in order) must be
equal, and the fast path must have been taken.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest
from tests.replay_helpers import Recorder, same_plans

from trainmaster.controller.loop import Controller
from trainmaster.core.cluster import parse_shorthand
from trainmaster.core.resources import Resources
from trainmaster.engines.sim.engine import SimConfig, SimEngine
from trainmaster.policies import srtf, tiresias
from trainmaster.policies.cycle import Cycle
from trainmaster.policies.pending import PendingDemand
from trainmaster.policies.preemption import LowerRank
from trainmaster.policies.snapshot import JobView, Plan, Snapshot
from trainmaster.policies.tiresias import Tiresias
from trainmaster.workloads.loaders import load_workload


def replay(make: Callable[[], Cycle], switches: dict[str, tuple[type, bool]],
           monkeypatch: pytest.MonkeyPatch) -> tuple[list[Plan], dict[str, int]]:
    """Every plan, with `switches` (name -> (class, value)) set; counts of the rooms whose bisection moved
    past some holder ranked ahead ("passed") and of the pending jobs' sums ("sums")."""
    counts = {"passed": 0, "sums": 0}
    room, of = LowerRank.room, PendingDemand.of

    def counted_room(self: LowerRank, claimant: JobView) -> Resources | None:
        before = self.cursor
        out = room(self, claimant)
        counts["passed"] += self.cursor > before
        return out

    def counted_of(self: PendingDemand, snap: Snapshot, pending: Sequence[str]) -> Resources:
        counts["sums"] += 1
        return of(self, snap, pending)

    with monkeypatch.context() as patch:
        for name, (owner, on) in switches.items():
            patch.setattr(owner, name, on)
        patch.setattr(LowerRank, "room", counted_room)
        patch.setattr(PendingDemand, "of", counted_of)
        recorder = Recorder(make())
        workload = load_workload("synthetic:300:60", max_factor=1.0, seed=3, oracle=True)
        Controller(SimEngine(parse_shorthand("4x4"), workload, SimConfig()), recorder).run()
    return recorder.plans, counts


@pytest.mark.parametrize("switch", ["bisect_room", "ranked_holders"])
@pytest.mark.parametrize("make", [tiresias.make, srtf.make], ids=["tiresias", "srtf"])
def test_lower_rank_plans_alike(make: Callable[[], Cycle], switch: str, monkeypatch: pytest.MonkeyPatch) -> None:
    fast, fast_counts = replay(make, {switch: (LowerRank, True)}, monkeypatch)
    slow, slow_counts = replay(make, {switch: (LowerRank, False)}, monkeypatch)
    same_plans(fast, slow, least=100)  # (`Plan` equality covers `wake_after`)
    assert fast_counts["passed"] == slow_counts["passed"] > 0  # rooms of claimants ranked after some holders


def test_first_misfit_plans_alike(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same plans with and without the early give-up; with it, fewer sums of the pending jobs' minimums."""
    fast, fast_counts = replay(tiresias.make, {"first_misfit": (Tiresias, True)}, monkeypatch)
    slow, slow_counts = replay(tiresias.make, {"first_misfit": (Tiresias, False)}, monkeypatch)
    same_plans(fast, slow, least=100)
    assert fast_counts["sums"] < slow_counts["sums"] / 2  # most pending passes gave up on the first job
