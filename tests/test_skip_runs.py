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

from collections.abc import Callable

import pytest
from bench.decision_time import snapshot
from tests.replay_helpers import Recorder, same_plans

from trainmaster.controller.loop import Controller
from trainmaster.core.cluster import parse_shorthand
from trainmaster.engines.sim.engine import SimConfig, SimEngine
from trainmaster.policies import cycle, preemption
from trainmaster.policies.cycle import Cycle, KeptGangs
from trainmaster.policies.preemption import VictimRule
from trainmaster.policies.registry import make_policy
from trainmaster.policies.snapshot import Plan
from trainmaster.workloads.loaders import load_workload

SWITCHES = {"skip_runs": VictimRule, "kept": KeptGangs}


def _run(preset: str, switch: str, on: bool, monkeypatch: pytest.MonkeyPatch,
         decide: Callable[[Cycle], list[Plan]]) -> tuple[list[Plan], dict[str, int]]:
    """The plans `decide` makes with `switch` set to `on`; how many claimants runs skipped ("skipped") and how
    many gang keys the place phase computed ("keys")."""
    seen = {"skipped": 0, "keys": 0}
    skippable, gang_key = preemption._skippable, cycle.gang_key

    def counted_skippable(keys: list[object], start: int, *rest: object) -> int:
        found = skippable(keys, start, *rest)  # type: ignore[arg-type]
        seen["skipped"] += found - start
        return found

    def counted_key(*args: object) -> object:
        seen["keys"] += 1
        return gang_key(*args)  # type: ignore[arg-type]

    with monkeypatch.context() as patch:
        patch.setattr(SWITCHES[switch], switch, on)
        patch.setattr(VictimRule, "skip_runs_from", 0)  # (the replay's lines are short: every run taken)
        patch.setattr(preemption, "_skippable", counted_skippable)
        patch.setattr(cycle, "gang_key", counted_key)
        policy = make_policy(preset)
        assert isinstance(policy, Cycle)
        return decide(policy), seen


def _replay(policy: Cycle) -> list[Plan]:
    recorder = Recorder(policy)
    workload = load_workload("synthetic:300:60", max_factor=1.0, seed=3, oracle=True)
    Controller(SimEngine(parse_shorthand("4x4"), workload, SimConfig()), recorder).run()
    return recorder.plans


def _busy(policy: Cycle) -> list[Plan]:
    snap = snapshot(busy=True, pending=4000)  # (more than the victims make room for)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(VictimRule, "skip_runs_from", 128)  # (the default: a long rest)
        return [policy.decide(snap), policy.decide(snap)]


@pytest.mark.parametrize("preset", ["tiresias", "srtf", "trainmaster"])
def test_skip_runs_plan_alike(preset: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for decide, least in ((_replay, 100), (_busy, 1)):
        fast, fast_seen = _run(preset, "skip_runs", True, monkeypatch, decide)
        slow, slow_seen = _run(preset, "skip_runs", False, monkeypatch, decide)
        same_plans(fast, slow, least=least)
        if preset == "trainmaster":  # (its place phase keys no gang: every claimant is stepped, as before)
            assert fast_seen["skipped"] == 0
            continue
        assert fast_seen["skipped"] > 0 == slow_seen["skipped"]  # runs of claimants were left blocked at once
        assert decide is _replay or fast_seen["skipped"] > 1000  # (the busy snapshot: most of its line)


@pytest.mark.parametrize("preset", ["tiresias", "srtf"])
def test_kept_gangs_plan_alike(preset: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for decide, least in ((_replay, 100), (_busy, 1)):
        fast, fast_seen = _run(preset, "kept", True, monkeypatch, decide)
        slow, slow_seen = _run(preset, "kept", False, monkeypatch, decide)
        same_plans(fast, slow, least=least)
        assert fast_seen["keys"] < 0.6 * slow_seen["keys"]  # most keys were read off the memo
