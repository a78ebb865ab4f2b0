"""Session 12's busy-line steps plan exactly as their references.

`VictimRule.skip_runs`: once preemption is `exhausted` with a long line left, the claimants whose gang is
lost or did not fit as things stand are left blocked a run at a time (C-level passes over their keys, as the
place phase left them) instead of a step each.
`KeptGangs.kept`: the place phase keeps each pending job's `gang_key` per view across decisions instead of
computing it per job per decision. Each preset replays a contended workload (a long line, preemption,
migration) and decides the decision bench's busy snapshot with each switch on and off: every plan equal,
its allocations and waits in the same order, and the fast path seen taken.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator

import pytest
from bench.decision_time import snapshot
from tests.replay_helpers import Replayed, on_and_off, preset_plans

from trainmaster.policies import cycle, preemption
from trainmaster.policies.cycle import BlockedLine, Cycle, KeptGangs
from trainmaster.policies.preemption import VictimRule
from trainmaster.policies.registry import make_policy
from trainmaster.policies.snapshot import Plan
from trainmaster.workloads.loaders import load_workload

SWITCHES = {"skip_runs": VictimRule, "kept": KeptGangs}
WORKLOAD = load_workload("synthetic:300:60", max_factor=1.0, seed=3, oracle=True)


def _replay(preset: str) -> list[Plan]:
    return preset_plans(preset, WORKLOAD)


def _busy(preset: str) -> list[Plan]:
    policy = make_policy(preset)
    assert isinstance(policy, Cycle)
    snap = snapshot(busy=True, pending=4000)  # (more than the victims make room for)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(VictimRule, "skip_runs_from", 128)  # (the default: a long rest)
        return [policy.decide(snap), policy.decide(snap)]


def _runs(preset: str, switch: str, monkeypatch: pytest.MonkeyPatch
          ) -> Iterator[tuple[Callable[[str], list[Plan]], Replayed, Replayed]]:
    """Per way of deciding (the replay, the busy snapshot): the plans with `switch` on and off, alike; how many
    claimants runs skipped ("skipped") and the gang keys the place phase computed ("keys")."""
    def skipped(found: int, keys: list[object], start: int, *rest: object) -> int:
        return found - start

    for decide, least in ((_replay, 100), (_busy, 1)):
        yield decide, *on_and_off(monkeypatch, functools.partial(decide, preset), (SWITCHES[switch], switch),
                                  (VictimRule, "skip_runs_from", 0, 0),  # (the replay's lines are short: every run)
                                  spies={"skipped": (preemption, "_skippable", skipped), "keys": (cycle, "gang_key")},
                                  least=least)


@pytest.mark.parametrize("preset", ["tiresias", "srtf", "trainmaster"])
def test_skip_runs_plan_alike(preset: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for decide, fast, slow in _runs(preset, "skip_runs", monkeypatch):
        fast_skipped, slow_skipped = sum(fast.calls["skipped"]), sum(slow.calls["skipped"])
        # (trainmaster: its place phase keys no gang; its LAS pass hands kept keys over, `las.LasPreempt`)
        assert fast_skipped > 0 == slow_skipped  # runs of claimants were left blocked at once
        assert decide is _replay or fast_skipped > 1000  # (the busy snapshot: most of its line)


@pytest.mark.parametrize("preset", ["tiresias", "srtf"])
def test_kept_gangs_plan_alike(preset: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # (tiresias' order keeps its line for the cut, a `gang_key` per job joining it, in both runs: off here, so
    # the count is the place phase's alone.)
    monkeypatch.setattr(BlockedLine, "cut", False)
    for _, fast, slow in _runs(preset, "kept", monkeypatch):
        assert len(fast.calls["keys"]) < 0.6 * len(slow.calls["keys"])  # most keys were read off the memo
